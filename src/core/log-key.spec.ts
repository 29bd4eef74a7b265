import { createHash } from 'node:crypto';
import { keyHash, LogKeys } from './log-key.js';

const HASH = createHash('sha256')
  .update('invoice:42')
  .digest('hex')
  .slice(0, 16);

describe('keyHash', () => {
  it('is the first 16 hex digits of the sha256 of the key (UTF-8)', () => {
    expect(keyHash('abc')).toBe('ba7816bf8f01cfea');
    expect(keyHash('clé')).toBe(
      createHash('sha256').update('clé', 'utf8').digest('hex').slice(0, 16),
    );
  });
});

describe('LogKeys', () => {
  it("shows the hash of the key, and not its scope, by default ('hash')", () => {
    const keys = new LogKeys({ telemetry: { keys: 'hash' } });
    expect(keys.fields('user-7', 'invoice:42')).toEqual([`key_hash=${HASH}`]);
    expect(keys.phrase('invoice:42')).toBe(`key with hash ${HASH}`);
  });

  it("hashes keys when telemetry is off: the setting's default holds", () => {
    const keys = new LogKeys({ telemetry: false });
    expect(keys.mode).toBe('hash');
    expect(keys.fields('user-7', 'invoice:42')).toEqual([`key_hash=${HASH}`]);
  });

  it("shows the key and its scope as they are with 'raw'", () => {
    const keys = new LogKeys({ telemetry: { keys: 'raw' } });
    expect(keys.fields('user-7', 'invoice:42')).toEqual([
      'scope="user-7"',
      'key="invoice:42"',
    ]);
    expect(keys.fields(undefined, 'invoice:42')).toEqual(['key="invoice:42"']);
    expect(keys.phrase('invoice:42')).toBe('key "invoice:42"');
  });

  it("shows neither with 'none', nor anything for a keyless request", () => {
    const none = new LogKeys({ telemetry: { keys: 'none' } });
    expect(none.fields('user-7', 'invoice:42')).toEqual([]);
    expect(none.phrase('invoice:42')).toBe('the key');
    const raw = new LogKeys({ telemetry: { keys: 'raw' } });
    expect(raw.fields('user-7', undefined)).toEqual([]);
  });
});
