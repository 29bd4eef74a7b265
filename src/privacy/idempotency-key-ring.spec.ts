import { randomBytes } from 'node:crypto';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyEncryptionOptions } from '../interfaces/idempotency-privacy.interface.js';
import { IdempotencyKeyRing } from './idempotency-key-ring.js';
import { IdempotencyPrivacy } from './idempotency-privacy.service.js';

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

describe('IdempotencyKeyRing values that begin as sealed ones do', () => {
  const keys = { k1: randomBytes(32).toString('base64') };
  const migrating = new IdempotencyKeyRing({
    keys,
    current: 'k1',
    readPlaintext: true,
  });
  const strict = new IdempotencyKeyRing({ keys, current: 'k1' });
  const response = (body: string | Buffer) => ({
    status: 201,
    headers: { 'content-type': 'text/plain' },
    body: Buffer.from(body),
  });

  it.each([
    ['a body of IDS1 alone', 'IDS1'],
    ['a text body', 'IDS1-batch-1'],
    ['a key id too short for its length', 'IDS1\u0008batch-1'],
    ['a key id of other characters', `IDS1\u0002k!${'x'.repeat(40)}`],
  ])(
    'reads %s as it is with readPlaintext only, and reseals it with readPlaintext only',
    (_what, body) => {
      const stored = response(body);
      expect(migrating.keyIdOf(stored.body)).toBeUndefined();
      expect(migrating.openResponse('global', 'key', stored)).toEqual(stored);
      expect(() => strict.openResponse('global', 'key', stored)).toThrow(
        /^it is not sealed: it begins as a sealed value does/,
      );
      const resealed = IdempotencyPrivacy.withKeys({
        keys,
        current: 'k1',
        readPlaintext: true,
      }).reencrypt('global', 'key', stored)!;
      expect(strict.openResponse('global', 'key', resealed)).toEqual(stored);
      expect(() =>
        IdempotencyPrivacy.withKeys({ keys, current: 'k1' }).reencrypt(
          'global',
          'key',
          stored,
        ),
      ).toThrow(/^it is not sealed: it begins as a sealed value does/);
    },
  );

  it.each([0, 12, 27])(
    'never reads a sealed value cut short %i bytes after its key id as plaintext, with readPlaintext too',
    (kept) => {
      const sealed = migrating.sealResponse('global', 'key', response('paid'));
      const cut = {
        ...sealed,
        body: sealed.body.subarray(0, 'IDS1'.length + 1 + 'k1'.length + kept),
      };
      expect(migrating.keyIdOf(cut.body)).toBe('k1');
      expect(() => migrating.openResponse('global', 'key', cut)).toThrow(
        'it is truncated',
      );
    },
  );

  it('opens a well-formed value always, with readPlaintext too: one of a key not in the ring is unreadable', () => {
    const other = new IdempotencyKeyRing({
      keys: { gone: randomBytes(32) },
      current: 'gone',
    });
    const sealed = other.sealResponse('global', 'key', response('paid'));
    expect(migrating.keyIdOf(sealed.body)).toBe('gone');
    expect(() => migrating.openResponse('global', 'key', sealed)).toThrow(
      'it was sealed with key "gone", not in the key ring',
    );
    const step = other.sealStep('global', 'key', 'charge', { id: 'ch_1' });
    expect(() => migrating.openStep('global', 'key', 'charge', step)).toThrow(
      'it was sealed with key "gone", not in the key ring',
    );
  });

  it.each([
    ['text that is not base64', 'idempotency-sealed:batch-1'],
    ['base64 of a text body', `idempotency-sealed:${btoa('IDS1-batch-1')}`],
    ['the prefix alone', 'idempotency-sealed:'],
  ])(
    'reads a step result of %s as it is with readPlaintext only',
    (_what, result) => {
      expect(migrating.stepKeyIdOf(result)).toBeUndefined();
      expect(migrating.openStep('global', 'key', 'charge', result)).toBe(
        result,
      );
      expect(() => strict.openStep('global', 'key', 'charge', result)).toThrow(
        /^it is not sealed: it begins as a sealed value does/,
      );
    },
  );

  it('never reads bytes that are not a well-formed sealed value as a step result', () => {
    expect(() =>
      migrating.openStep('global', 'key', 'charge', Buffer.from('IDS1-x')),
    ).toThrow(/^it is not sealed/);
  });
});
