import { createHash } from 'node:crypto';
import { IdempotencyBodyUnreadableException } from '../exceptions/idempotency-body-unreadable.exception.js';
import {
  boundFingerprint,
  isLegacyFingerprint,
  legacyRequestFingerprint,
  queryParameters,
  requestFingerprint,
  selectFields,
  selectQuery,
  UnreadableBody,
  type FingerprintParts,
} from './request-fingerprint.js';

/** The fingerprint of a request with no path parameters and no query. */
function of(method: string, route: string, body: unknown): string {
  return requestFingerprint({ method, route, params: {}, query: [], body });
}

describe('requestFingerprint', () => {
  const body = {
    amount: 1250,
    currency: 'EUR',
    meta: { b: [1, { y: 2, x: 1 }], a: null },
  };
  const refund: FingerprintParts = {
    method: 'POST',
    route: '/accounts/:id/refund',
    params: { id: 'A' },
    query: queryParameters('/accounts/A/refund?amount=5&currency=EUR'),
    body: { reason: 'duplicate' },
  };

  it('is "v2:" and a sha256 hex digest', () => {
    expect(of('POST', '/payments', body)).toMatch(/^v2:[0-9a-f]{64}$/);
  });

  it('does not depend on the order of object keys, at any depth', () => {
    const reordered = {
      meta: { a: null, b: [1, { x: 1, y: 2 }] },
      currency: 'EUR',
      amount: 1250,
    };
    expect(of('POST', '/payments', reordered)).toBe(
      of('POST', '/payments', body),
    );
  });

  it('depends on array order, values, method and route', () => {
    const base = of('POST', '/payments', body);
    expect(of('POST', '/payments', { ...body, amount: 1251 })).not.toBe(base);
    expect(
      of('POST', '/payments', {
        ...body,
        meta: { ...body.meta, b: [{ y: 2, x: 1 }, 1] },
      }),
    ).not.toBe(base);
    expect(of('PUT', '/payments', body)).not.toBe(base);
    expect(of('POST', '/refunds', body)).not.toBe(base);
  });

  it('depends on the path parameters, not on their order', () => {
    const base = requestFingerprint(refund);
    expect(requestFingerprint({ ...refund, params: { id: 'B' } })).not.toBe(
      base,
    );
    const two = { ...refund, params: { id: 'A', currency: 'EUR' } };
    expect(
      requestFingerprint({ ...two, params: { currency: 'EUR', id: 'A' } }),
    ).toBe(requestFingerprint(two));
  });

  it('depends on the query, not on the order of its parameters; a repeated parameter keeps the order of its values', () => {
    const query = (url: string) =>
      requestFingerprint({ ...refund, query: queryParameters(url) });
    const base = requestFingerprint(refund);
    expect(query('/x?currency=EUR&amount=5')).toBe(base);
    expect(query('/x?amount=6&currency=EUR')).not.toBe(base);
    expect(query('/x?amount=5')).not.toBe(base);
    expect(query('/x?tag=a&amount=1&tag=b')).toBe(
      query('/x?amount=1&tag=a&tag=b'),
    );
    expect(query('/x?tag=a&tag=b')).not.toBe(query('/x?tag=b&tag=a'));
    // Decoded: two spellings of one value are one value.
    expect(query('/x?q=a%20b')).toBe(query('/x?q=a+b'));
    expect(query('/x?a=1&b=2')).not.toBe(query('/x?a=1%26b%3D2'));
  });

  it('tells apart the values and names whose escapes are not UTF-8, which Fastify and qs give the handler as sent, from each other and from any text', () => {
    const query = (url: string) =>
      requestFingerprint({ ...refund, query: queryParameters(url) });
    const invalid = query('/x?to=acct%FF1');
    expect(query('/x?to=acct%FE1')).not.toBe(invalid);
    expect(query('/x?to=acct%EF%BF%BD1')).not.toBe(invalid);
    expect(query('/x?to=acct%25FF1')).not.toBe(invalid);
    expect(query('/x?to=acct%FF1')).toBe(invalid);
    expect(query('/x?n%FF=1')).not.toBe(query('/x?n%FE=1'));
    expect(query('/x?n%FF=1')).not.toBe(query('/x?n%EF%BF%BD=1'));
  });

  it('tells apart the values a handler reads apart: a stray `%` beside an escape (Fastify and qs keep it all as sent), a fragment (Fastify reads it as query), the order of parameters qs merges into one array', () => {
    const query = (url: string) =>
      requestFingerprint({ ...refund, query: queryParameters(url) });
    expect(query('/x?note=100%%20off')).not.toBe(query('/x?note=100%25%20off'));
    expect(query('/x?a=%zz%41')).not.toBe(query('/x?a=%zzA'));
    expect(query('/x?note=100%%20off')).toBe(query('/x?note=100%%20off'));
    expect(query('/x?to=a#b')).not.toBe(query('/x?to=a%23b'));
    expect(query('/x#?to=a')).not.toBe(query('/x?to=a'));
    expect(query('/x?to=a#b')).not.toBe(query('/x?to=a#c'));
    // qs: `a`, `a[]` and `a[0]` are one array, in the order sent.
    expect(query('/x?a[]=x&a[0]=y')).not.toBe(query('/x?a[0]=y&a[]=x'));
    expect(query('/x?ids=1&ids[]=2')).not.toBe(query('/x?ids[]=2&ids=1'));
    // So are an object name and another of the same root: `a=2&a[b]=1` is
    // `["2", {"b": "1"}]`, the other way round `[{"b": "1"}, "2"]`.
    expect(query('/x?a=2&a[b]=1')).not.toBe(query('/x?a[b]=1&a=2'));
    expect(query('/x?a[b]=1&a[b][c]=2')).not.toBe(query('/x?a[b][c]=2&a[b]=1'));
    expect(query('/x?a[0][x]=1&a[0]=2')).not.toBe(query('/x?a[0]=2&a[0][x]=1'));
    expect(query('/x?a=1&z=2&a[b]=1')).toBe(query('/x?z=2&a=1&a[b]=1'));
    // Parameters of other names still in any order, object names too.
    expect(query('/x?b[c]=1&a=2')).toBe(query('/x?a=2&b[c]=1'));
    expect(query('/x?page[size]=10&page[number]=2')).toBe(
      query('/x?page[number]=2&page[size]=10'),
    );
    expect(query('/x?page[size]=10&page-token=x')).toBe(
      query('/x?page-token=x&page[size]=10'),
    );
  });

  it('reads a name that begins with a bracket group as qs does (`[a]` is `a`, `[a][b]` is `a[b]`): its order among the names qs merges it with counts', () => {
    const query = (url: string) =>
      requestFingerprint({ ...refund, query: queryParameters(url) });
    // `[a]=1&a=2` is `["1", "2"]`, the other way round `["2", "1"]`.
    expect(query('/x?[a]=1&a=2')).not.toBe(query('/x?a=2&[a]=1'));
    expect(query('/x?[a]=1&a[]=2')).not.toBe(query('/x?a[]=2&[a]=1'));
    expect(query('/x?[a]=1&a[b]=2')).not.toBe(query('/x?a[b]=2&[a]=1'));
    expect(query('/x?[a][b]=1&a=2')).not.toBe(query('/x?a=2&[a][b]=1'));
    expect(query('/x?[a][b]=1&a[b][c]=2')).not.toBe(
      query('/x?a[b][c]=2&[a][b]=1'),
    );
    // What follows a group up to the next one, qs drops: `[a]x[b]` is `a[b]`.
    expect(query('/x?[a]x[b]=1&a=2')).not.toBe(query('/x?a=2&[a]x[b]=1'));
    // `[]` spreads its values over the indexes: `[]=x&[0]=y` is
    // `{"0": ["x", "y"]}`, `[]=2&0[x]=1` is `{"0": ["2", {"x": "1"}]}`.
    expect(query('/x?[]=x&[0]=y')).not.toBe(query('/x?[0]=y&[]=x'));
    expect(query('/x?[]=2&0[x]=1')).not.toBe(query('/x?0[x]=1&[]=2'));
    expect(query('/x?[]=x&[]=y&1[a]=z')).not.toBe(query('/x?1[a]=z&[]=x&[]=y'));
    // Names qs does not merge, in any order still.
    expect(query('/x?[a]=1&b=2')).toBe(query('/x?b=2&[a]=1'));
    expect(query('/x?[a][b]=1&[a][c]=2')).toBe(query('/x?[a][c]=2&[a][b]=1'));
    expect(query('/x?[]=1&b=2')).toBe(query('/x?b=2&[]=1'));
    expect(query('/x?[a]=1')).not.toBe(query('/x?a=1'));
  });

  it('tells a string body from the JSON of the same text, and no body from an empty one', () => {
    expect(of('POST', '/x', '1')).not.toBe(of('POST', '/x', 1));
    expect(of('POST', '/x', undefined)).not.toBe(of('POST', '/x', ''));
    expect(of('POST', '/x', Buffer.from('ab'))).not.toBe(
      of('POST', '/x', 'ab'),
    );
  });

  it('tells apart string bodies that are not well-formed Unicode (lone surrogates), which UTF-8 would write alike, and keeps the digest of every other string', () => {
    // A JSON body "\ud800" (Fastify, a non-strict JSON parser) or a UTF-16
    // text body gives the handler a lone surrogate; in UTF-8 each is U+FFFD.
    const strings = ['\ud800', '\ud801', '\udc00', '\ufffd', 'a\ud800', ''];
    const prints = new Set(strings.map((text) => of('POST', '/x', text)));
    expect(prints.size).toBe(strings.length);
    expect(of('POST', '/x', '\ud800')).toBe(of('POST', '/x', '\ud800'));
    expect(of('POST', '/x', 'é\ufffd')).toBe(
      `v2:${createHash('sha256').update('POST\n/x\n{}\n[]\ns:é\ufffd').digest('hex')}`,
    );
  });

  it("tells apart a fingerprint function's values that are not well-formed Unicode, and keeps the digest of every other value", () => {
    const parts = { method: 'POST', route: '/x', params: {} };
    const values = ['\ud800', '\ud801', '\ufffd', 'a'];
    const prints = new Set(values.map((v) => boundFingerprint(parts, v)));
    expect(prints.size).toBe(values.length);
    expect(boundFingerprint(parts, 'é\ufffd')).toBe(
      `v2:${createHash('sha256').update('POST\n/x\n{}\nfingerprint\né\ufffd').digest('hex')}`,
    );
  });

  it('tells apart the numbers JSON writes alike (1e309, -1e309, NaN, null; -0 and 0), shallow and deep', () => {
    const deep = (leaf: unknown): unknown => {
      let value: unknown = { v: leaf };
      for (let i = 0; i < 40; i += 1) {
        value = [value];
      }
      return value;
    };
    for (const wrap of [(v: unknown) => ({ v }), deep]) {
      const values = [
        JSON.parse('1e309') as number,
        JSON.parse('-1e309') as number,
        NaN,
        null,
        0,
        JSON.parse('-0') as number,
        '-0',
        'Infinity',
        1n,
        1,
      ];
      const prints = new Set(values.map((v) => of('POST', '/x', wrap(v))));
      expect(prints.size).toBe(values.length);
    }
    // What the handler receives alike stays alike: 1.0 and 1, 1e2 and 100.
    expect(of('POST', '/x', JSON.parse('{"v":1.0}'))).toBe(
      of('POST', '/x', JSON.parse('{"v":1}')),
    );
    expect(of('POST', '/x', JSON.parse('[1e2]'))).toBe(of('POST', '/x', [100]));
  });

  it('ignores fields whose value is undefined, as JSON does', () => {
    expect(of('POST', '/x', { a: 1, b: undefined })).toBe(
      of('POST', '/x', { a: 1 }),
    );
  });

  it('keeps the fingerprints of stored records: the same digests as the releases before, for shallow and deep bodies', () => {
    // Each level nests an object in an object (two levels of JSON).
    const nested = (levels: number): unknown => {
      let value: unknown = { leaf: [1, 'x', null] };
      for (let i = 0; i < levels; i += 1) {
        value = { [`k${i % 3}`]: value, z: i, a: [false, undefined, i] };
      }
      return value;
    };
    const parts = (body: unknown): FingerprintParts => ({
      method: 'POST',
      route: '/p/:id',
      params: { id: 'A', b: 'x' },
      query: [['q', '1']],
      body,
    });
    const digests = {
      payment: {
        amount: 1250,
        currency: 'EUR',
        merchantId: 'm_42',
        meta: {
          b: [1, { y: 2, x: 1 }],
          a: null,
          u: undefined,
          s: 'é"\\\n\u2028',
        },
      },
      odd: [
        [],
        {},
        [null, undefined, () => 1, 'x'],
        // An object without fields, as a Date was written before it counted
        // (see the test below).
        { f: () => 1, d: {} },
      ],
      nested15: nested(15),
      nested16: nested(16),
      nested17: nested(17),
      nested70: nested(70),
    };
    expect(
      Object.fromEntries(
        Object.entries(digests).map(([name, body]) => [
          name,
          requestFingerprint(parts(body)),
        ]),
      ),
    ).toEqual({
      payment:
        'v2:e9afecd5ebedd19a1c6056ac5086a3b518281a1abe02cf43ae6b9bb71e0142b3',
      odd: 'v2:b1152d1c5199418e6018e5471fdcf8260b3e0bb5008e09fb3066c0d115ae6e80',
      nested15:
        'v2:090ec4c156b945f49143d6466b3f36f617be468f148f5d2583306c7b3b9d4a06',
      nested16:
        'v2:fa8ee0d36010a1065497c36c46b8d76fa9c1f67f2b1b3df110744b392fa63556',
      nested17:
        'v2:acdec2d2091ffa61a49d2f2947cea478bd3bf4907fbbe0d408b912cc43f0d366',
      nested70:
        'v2:e8a389c7c7c3ad39e911b638bfc3116e4a9acf28a857fa7da54b8e49380e40a2',
    });
  });

  it('keeps the fingerprints of stored records with a query: the same digests as the releases before, for plain and bracketed names', () => {
    const withQuery = (url: string) =>
      requestFingerprint({
        method: 'POST',
        route: '/p/:id',
        params: { id: 'A', b: 'x' },
        query: queryParameters(url),
        body: { ok: true },
      });
    expect({
      plain: withQuery('/p/A?b=2&a=1&a=0&c&q=%C3%A9'),
      bracketed: withQuery(
        '/p/A?tag[]=a&z=1&tag[0]=b&page[size]=1&page[number]=2&a=2&a[b]=1&n%FF=1#f',
      ),
    }).toEqual({
      plain:
        'v2:6a5961197d071ae1f6f148f789b321c541ce81396b68239b8c381639e99ca951',
      bracketed:
        'v2:3223c5e7cf5f7bbdfba32265465c67263de44f480aa2e69a88b2c2e82f8a3ec5',
    });
  });

  it("tells apart the values that no JSON parser gives but an application's own may (a reviver's Date, a deserializer's Map, Set or class instance), from each other and from the JSON of the same content", () => {
    class Money {
      constructor(readonly amount: number) {}
    }
    const date = new Date('2024-01-01T00:00:00Z');
    const values = [
      date,
      new Date('2031-12-31T00:00:00Z'),
      date.toJSON(),
      {},
      new Map([['a', 1]]),
      new Map([['a', 2]]),
      new Map([[1, 'a']]),
      { a: 1 },
      [['a', 1]],
      new Set([1, 2]),
      new Set([2, 1]),
      [1, 2],
      new Money(5),
      new Money(6),
      { amount: 5 },
      Buffer.from('ab'),
      { type: 'Buffer', data: [97, 98] },
    ];
    const deep = (leaf: unknown): unknown => {
      let value: unknown = { v: leaf };
      for (let i = 0; i < 40; i += 1) {
        value = [value];
      }
      return value;
    };
    for (const wrap of [(v: unknown) => ({ v }), deep]) {
      const prints = new Set(values.map((v) => of('POST', '/x', wrap(v))));
      expect(prints.size).toBe(values.length);
      // The same value is the same request.
      expect(of('POST', '/x', wrap(new Date(date.getTime())))).toBe(
        of('POST', '/x', wrap(date)),
      );
      expect(of('POST', '/x', wrap(new Money(5)))).toBe(
        of('POST', '/x', wrap(new Money(5))),
      );
    }
  });

  it('fingerprints a deeply nested body without exhausting the stack', () => {
    const depth = 100_000;
    const deep = JSON.parse('['.repeat(depth) + ']'.repeat(depth)) as unknown;
    const other = JSON.parse(
      '['.repeat(depth) + '1' + ']'.repeat(depth),
    ) as unknown;
    expect(of('POST', '/x', deep)).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(of('POST', '/x', deep)).not.toBe(of('POST', '/x', other));
  });

  it('refuses a body that could not be read, whatever fields the route selects, rather than take it for none', () => {
    const unread = new UnreadableBody('text/plain; charset=utf-8');
    expect(() => of('POST', '/x', unread)).toThrow(
      IdempotencyBodyUnreadableException,
    );
    expect(() =>
      of('POST', '/x', selectFields(unread, { include: ['amount'] })),
    ).toThrow(IdempotencyBodyUnreadableException);
    expect(() =>
      legacyRequestFingerprint({ method: 'POST', route: '/x', body: unread }),
    ).toThrow(IdempotencyBodyUnreadableException);
    let refusal: unknown;
    try {
      of('POST', '/x', unread);
    } catch (error) {
      refusal = error;
    }
    const problem = (
      refusal as IdempotencyBodyUnreadableException
    ).getProblem();
    expect(problem).toMatchObject({
      type: 'urn:idempotency:unreadable-body',
      status: 415,
      detail: expect.stringContaining(
        "register a parser for its media type in the application (for example app.useBodyParser('text'))",
      ) as string,
    });
    expect(JSON.stringify(problem)).not.toContain('text/plain');
  });
});

describe('legacyRequestFingerprint', () => {
  it("is 0.1.0's formula: sha256 of the method, the route template and the canonical body", () => {
    const expected = createHash('sha256')
      .update('POST\n/accounts/:id/refund\nj:{"amount":5,"currency":"EUR"}')
      .digest('hex');
    const legacy = legacyRequestFingerprint({
      method: 'POST',
      route: '/accounts/:id/refund',
      body: { currency: 'EUR', amount: 5 },
    });
    expect(legacy).toBe(expected);
    expect(isLegacyFingerprint(legacy)).toBe(true);
    expect(isLegacyFingerprint(of('POST', '/x', {}))).toBe(false);
  });
});

describe('queryParameters', () => {
  it('decodes the query of a URL, in order, a repeated parameter once per value', () => {
    expect(queryParameters('/a/b?x=1&y=%C3%A9&x=2&flag&empty=')).toEqual([
      ['x', '1'],
      ['y', 'é'],
      ['x', '2'],
      ['flag', ''],
      ['empty', ''],
    ]);
    expect(queryParameters('/a/b')).toEqual([]);
    expect(queryParameters(undefined)).toEqual([]);
    // Malformed escapes are kept as they are, never thrown: all of the
    // component, as Fastify and qs give it to the handler.
    expect(queryParameters('/a?bad=%zz%')).toEqual([
      ['bad', { undecoded: '%zz%' }],
    ]);
    expect(queryParameters('/a?note=100%%20off')).toEqual([
      ['note', { undecoded: '100%%20off' }],
    ]);
    // A fragment, which Node.js lets through, counts as sent.
    expect(queryParameters('/a?x=1#y=2')).toEqual([
      [{ undecoded: '#' }, { undecoded: 'y=2' }],
      ['x', '1'],
    ]);
    expect(queryParameters('/a#?x=1')).toEqual([
      [{ undecoded: '#' }, { undecoded: '?x=1' }],
    ]);
    // As WHATWG's parser reads them: `+` a space, empty pairs skipped.
    expect(queryParameters('/a?&x+y=1+2&&z==3&')).toEqual([
      ['x y', '1 2'],
      ['z', '=3'],
    ]);
    // Escapes that are not UTF-8, as sent, marked.
    expect(queryParameters('/a?a=%FF&n%C3=b+c')).toEqual([
      ['a', { undecoded: '%FF' }],
      [{ undecoded: 'n%C3' }, 'b c'],
    ]);
  });
});

describe('selectFields and selectQuery', () => {
  const body = { amount: 1, sentAt: 2, _: 3 };
  const query = queryParameters('/x?_=9&amount=1&page=2');

  it('keep a `__proto__` field of a parsed JSON body as a field', () => {
    const parsed: unknown = JSON.parse('{"amount":1,"__proto__":{"x":1}}');
    const fingerprint = (fields: unknown) =>
      requestFingerprint({
        method: 'POST',
        route: '/r',
        params: {},
        query: [],
        body: selectFields(fields, { exclude: ['body.sentAt'] }),
      });
    expect(fingerprint(parsed)).not.toBe(fingerprint({ amount: 1 }));
  });

  it('apply a plain name to the body and the query alike', () => {
    const selection = { exclude: ['_'] };
    expect(selectFields(body, selection)).toEqual({ amount: 1, sentAt: 2 });
    expect(selectQuery(query, selection)).toEqual([
      ['amount', '1'],
      ['page', '2'],
    ]);
  });

  it('apply a name prefixed "query." or "body." to that part only', () => {
    const selection = { exclude: ['query._', 'body.sentAt'] };
    expect(selectFields(body, selection)).toEqual({ amount: 1, _: 3 });
    expect(selectQuery(query, selection)).toEqual([
      ['amount', '1'],
      ['page', '2'],
    ]);
  });

  it('keep only the included names, of either part', () => {
    const selection = { include: ['amount', 'query.page'] };
    expect(selectFields(body, selection)).toEqual({ amount: 1 });
    expect(selectQuery(query, selection)).toEqual([
      ['amount', '1'],
      ['page', '2'],
    ]);
  });

  it('name by its root a query parameter qs gives the handler under it (`tag[]`, `tag[0]`, `tag[x]` are `query.tag`)', () => {
    const tags = queryParameters('/x?tag[]=a&tag[0]=b&tag[x]=c&tags=d&page=1');
    expect(selectQuery(tags, { include: ['query.tag'] })).toEqual([
      ['tag[]', 'a'],
      ['tag[0]', 'b'],
      ['tag[x]', 'c'],
    ]);
    expect(selectQuery(tags, { exclude: ['tag'] })).toEqual([
      ['tags', 'd'],
      ['page', '1'],
    ]);
  });

  it("keep a class instance's fields marked as an instance's, and a body not written by its fields whole", () => {
    class Payment {
      amount = 1;
      sentAt = 2;
    }
    const selection = { exclude: ['sentAt'] };
    const fingerprint = (fields: unknown) => of('POST', '/r', fields);
    const selected = selectFields(new Payment(), selection);
    expect(selected).toBeInstanceOf(Payment);
    expect({ ...(selected as object) }).toEqual({ amount: 1 });
    expect(fingerprint(selected)).not.toBe(
      fingerprint(selectFields({ amount: 1, sentAt: 2 }, selection)),
    );
    const date = new Date(0);
    expect(selectFields(date, selection)).toBe(date);
    const map = new Map([['sentAt', 1]]);
    expect(selectFields(map, selection)).toBe(map);
  });

  it('name by its root a query parameter whose name begins with a bracket group (`[amount]`, `[amount][x]` are `query.amount` to qs)', () => {
    const amounts = queryParameters(
      '/x?[amount]=5&[amount][x]=1&[amounts]=2&amount=3&note=x',
    );
    expect(selectQuery(amounts, { include: ['amount'] })).toEqual([
      ['[amount]', '5'],
      ['[amount][x]', '1'],
      ['amount', '3'],
    ]);
    expect(selectQuery(amounts, { exclude: ['query.amount'] })).toEqual([
      ['[amounts]', '2'],
      ['note', 'x'],
    ]);
  });

  it('keep everything without include or exclude, and a non-object body whole', () => {
    expect(selectFields(body, {})).toBe(body);
    expect(selectQuery(query, {})).toEqual(query);
    expect(selectFields('text', { exclude: ['a'] })).toBe('text');
  });
});
