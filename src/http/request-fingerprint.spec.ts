import { requestFingerprint } from './request-fingerprint.js';

describe('requestFingerprint', () => {
  const body = {
    amount: 1250,
    currency: 'EUR',
    meta: { b: [1, { y: 2, x: 1 }], a: null },
  };

  it('is a sha256 hex digest', () => {
    expect(requestFingerprint('POST', '/payments', body)).toMatch(
      /^[0-9a-f]{64}$/,
    );
  });

  it('does not depend on the order of object keys, at any depth', () => {
    const reordered = {
      meta: { a: null, b: [1, { x: 1, y: 2 }] },
      currency: 'EUR',
      amount: 1250,
    };
    expect(requestFingerprint('POST', '/payments', reordered)).toBe(
      requestFingerprint('POST', '/payments', body),
    );
  });

  it('depends on array order, values, method and route', () => {
    const base = requestFingerprint('POST', '/payments', body);
    expect(
      requestFingerprint('POST', '/payments', { ...body, amount: 1251 }),
    ).not.toBe(base);
    expect(
      requestFingerprint('POST', '/payments', {
        ...body,
        meta: { ...body.meta, b: [{ y: 2, x: 1 }, 1] },
      }),
    ).not.toBe(base);
    expect(requestFingerprint('PUT', '/payments', body)).not.toBe(base);
    expect(requestFingerprint('POST', '/refunds', body)).not.toBe(base);
  });

  it('tells a string body from the JSON of the same text, and no body from an empty one', () => {
    expect(requestFingerprint('POST', '/x', '1')).not.toBe(
      requestFingerprint('POST', '/x', 1),
    );
    expect(requestFingerprint('POST', '/x', undefined)).not.toBe(
      requestFingerprint('POST', '/x', ''),
    );
    expect(requestFingerprint('POST', '/x', Buffer.from('ab'))).not.toBe(
      requestFingerprint('POST', '/x', 'ab'),
    );
  });

  it('ignores fields whose value is undefined, as JSON does', () => {
    expect(requestFingerprint('POST', '/x', { a: 1, b: undefined })).toBe(
      requestFingerprint('POST', '/x', { a: 1 }),
    );
  });

  it('fingerprints a deeply nested body without exhausting the stack', () => {
    const depth = 100_000;
    const deep = JSON.parse('['.repeat(depth) + ']'.repeat(depth)) as unknown;
    const other = JSON.parse(
      '['.repeat(depth) + '1' + ']'.repeat(depth),
    ) as unknown;
    expect(requestFingerprint('POST', '/x', deep)).toMatch(/^[0-9a-f]{64}$/);
    expect(requestFingerprint('POST', '/x', deep)).not.toBe(
      requestFingerprint('POST', '/x', other),
    );
  });
});
