import { derivedKey, type DerivedKeyParts } from './derived-key.js';

describe('derivedKey', () => {
  const parts: DerivedKeyParts = {
    scope: 'tenant-a',
    key: 'order-1',
    fingerprint: 'v2:abc',
    generation: '1764000000000000',
    name: 'charge',
  };

  it('is a UUID of version 8 and the RFC 9562 variant, 36 characters whatever the length of its parts', () => {
    const uuid =
      /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(derivedKey(parts)).toMatch(uuid);
    const long = derivedKey({ ...parts, key: 'k'.repeat(255) });
    expect(long).toMatch(uuid);
  });

  it('is stable: the same parts derive the same key', () => {
    expect(derivedKey({ ...parts })).toBe(derivedKey(parts));
  });

  it('changes with each part: scope, key, fingerprint, generation and name', () => {
    const keys = new Set([
      derivedKey(parts),
      derivedKey({ ...parts, scope: 'tenant-b' }),
      derivedKey({ ...parts, key: 'order-2' }),
      derivedKey({ ...parts, fingerprint: 'v2:abd' }),
      derivedKey({ ...parts, generation: '1764000000000001' }),
      derivedKey({ ...parts, name: 'refund' }),
    ]);
    expect(keys.size).toBe(6);
  });

  it('cannot be made alike by moving text from one part to the next', () => {
    expect(derivedKey({ ...parts, scope: 'a:', key: 'b' })).not.toBe(
      derivedKey({ ...parts, scope: 'a', key: ':b' }),
    );
    expect(derivedKey({ ...parts, key: 'k', name: 'x:y' })).not.toBe(
      derivedKey({ ...parts, key: 'k:x', name: 'y' }),
    );
  });
});
