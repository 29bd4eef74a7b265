import { randomBytes } from 'node:crypto';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyEncryptionOptions } from '../interfaces/idempotency-privacy.interface.js';
import { IdempotencyKeyRing } from './idempotency-key-ring.js';

/** The error a ring of `options` is refused with. */
function refusal(options: unknown): IdempotencyConfigurationError {
  try {
    new IdempotencyKeyRing(options as IdempotencyEncryptionOptions);
  } catch (error) {
    return error as IdempotencyConfigurationError;
  }
  throw new Error('The ring was accepted');
}

describe('IdempotencyKeyRing options', () => {
  const key = randomBytes(32).toString('base64');

  it.each([
    ['its keys given as one key', { keys: key, current: 'k1' }],
    ['a key in place of the ring', key],
    ['keys in an array', [key, key]],
    [
      'a key of the wrong length',
      { keys: { k1: key.slice(4) }, current: 'k1' },
    ],
    ['a key given as its id', { keys: { [key]: key }, current: 'k1' }],
    ['a key given as the current id', { keys: { k1: key }, current: key }],
  ])('never says a key in its error (%s)', (_what, options) => {
    const error = refusal(options);
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    for (const secret of [key, key.slice(4)]) {
      expect(error.message).not.toContain(secret);
      expect(error.message).not.toContain(secret.slice(0, 16));
    }
  });

  it('says what is wrong by its shape, and names the ids', () => {
    expect(refusal({ keys: key, current: 'k1' }).message).toContain(
      'Invalid "encryption": an object with "keys": a string of 44 characters, "current": a string of 2 characters.',
    );
    expect(refusal({ keys: { k1: key }, current: 'k2' }).message).toContain(
      'Invalid "encryption.current": "k2" is not one of the ids of "encryption.keys" ("k1").',
    );
  });
});

describe('IdempotencyKeyRing step results', () => {
  const ring = new IdempotencyKeyRing({
    keys: { k1: randomBytes(32).toString('base64') },
    current: 'k1',
  });
  const result = { id: 'ch_1', note: 'y'.repeat(3000) };
  const json = Buffer.byteLength(JSON.stringify(result));

  it('seals in bytes for a store that keeps bytes: the JSON and 35 bytes for key "k1"', () => {
    const sealed = ring.sealStep('global', 'key', 'charge', result, true);
    expect(Buffer.isBuffer(sealed)).toBe(true);
    expect((sealed as Buffer).length).toBe(json + 35);
    expect(ring.stepKeyIdOf(sealed)).toBe('k1');
    expect(ring.openStep('global', 'key', 'charge', sealed)).toEqual(result);
  });

  it('seals as base64 text for a store of JSON values, and opens it as before', () => {
    const sealed = ring.sealStep('global', 'key', 'charge', result);
    expect(sealed).toMatch(/^idempotency-sealed:/);
    expect(ring.stepKeyIdOf(sealed)).toBe('k1');
    expect(ring.openStep('global', 'key', 'charge', sealed)).toEqual(result);
  });

  it('opens a result sealed in bytes for its own step only', () => {
    const sealed = ring.sealStep('global', 'key', 'charge', result, true);
    expect(() => ring.openStep('global', 'key', 'refund', sealed)).toThrow(
      /does not authenticate it/,
    );
  });
});
