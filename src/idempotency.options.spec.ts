import type {
  IdempotencyErrorPolicy,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
import { resolveRouteOptions } from './idempotency.options.js';
import { resolveModuleOptions } from './idempotency.module-options.js';
import {
  configurationError,
  refusalMessage,
  refusal,
  untyped,
} from '../test/utils/option-refusals.js';

describe('the route options, through resolveModuleOptions', () => {
  it('keeps the default key rules it is not given', () => {
    const { keyValidation } = resolveModuleOptions({
      keyValidation: { maxLength: 36 },
    });
    expect(keyValidation).toEqual({
      minLength: 1,
      maxLength: 36,
      pattern: /^[\x21-\x7e]+$/,
      validate: undefined,
    });
  });

  it('keeps fingerprint fields as given', () => {
    const fields = { include: ['amount'], exclude: ['sentAt'] };
    expect(resolveModuleOptions({ fingerprint: fields }).fingerprint).toBe(
      fields,
    );
  });

  it('rounds durations in milliseconds to whole milliseconds', () => {
    expect(resolveModuleOptions({ ttl: 1500.4 }).ttlMs).toBe(1500);
    expect(resolveModuleOptions({ waitTimeout: '1.5s' }).waitTimeoutMs).toBe(
      1500,
    );
  });

  describe('concurrency', () => {
    it.each(['reject', 'wait'] as const)('accepts %p', (concurrency) => {
      expect(resolveModuleOptions({ concurrency }).concurrency).toBe(
        concurrency,
      );
    });

    it.each([
      ['sometimes', '"sometimes"'],
      ['Wait', '"Wait"'],
      [null, 'null'],
    ])('refuses %p', (concurrency, shown) => {
      expect(refusal(untyped({ concurrency }))).toBe(
        refusalMessage(
          `Invalid "concurrency": ${shown}.`,
          "Use 'reject' or 'wait'.",
        ),
      );
    });
  });

  describe('retryAfter', () => {
    it.each([0, 1, 30])('accepts %p seconds', (retryAfter) => {
      expect(resolveModuleOptions({ retryAfter }).retryAfter).toBe(retryAfter);
    });

    it.each([
      [-1, '-1'],
      [1.5, '1.5'],
      [Number.NaN, 'null'],
      [Infinity, 'null'],
      ['1', '"1"'],
    ])('refuses %p', (retryAfter, shown) => {
      expect(refusal(untyped({ retryAfter }))).toBe(
        refusalMessage(
          `Invalid "retryAfter": ${shown}.`,
          'Give a whole number of seconds (0 or more).',
        ),
      );
    });
  });

  describe('keyValidation', () => {
    it.each([
      [{ minLength: 1, maxLength: 1 }],
      [{ minLength: 36, maxLength: 36 }],
      [{ minLength: 1, maxLength: 1024 }],
    ])('accepts the lengths %p', (lengths) => {
      expect(
        resolveModuleOptions({ keyValidation: lengths }).keyValidation,
      ).toMatchObject(lengths);
    });

    it.each([
      [{ minLength: 0 }, '{"minLength":0,"maxLength":255}'],
      [{ minLength: -1 }, '{"minLength":-1,"maxLength":255}'],
      [{ minLength: 1.5 }, '{"minLength":1.5,"maxLength":255}'],
      [{ maxLength: 1025 }, '{"minLength":1,"maxLength":1025}'],
      [{ maxLength: 10.5 }, '{"minLength":1,"maxLength":10.5}'],
      [{ minLength: 10, maxLength: 9 }, '{"minLength":10,"maxLength":9}'],
      [{ minLength: 300 }, '{"minLength":300,"maxLength":255}'],
      [{ maxLength: Number.NaN }, '{"minLength":1,"maxLength":null}'],
    ])('refuses the lengths %p', (keyValidation, shown) => {
      expect(refusal({ keyValidation })).toBe(
        refusalMessage(
          `Invalid "keyValidation": ${shown}.`,
          'Give whole numbers with 1 <= minLength <= maxLength <= 1024.',
        ),
      );
    });

    it.each([
      ['^[a-z]+$', '"^[a-z]+$"'],
      [null, 'null'],
      [{}, '{}'],
    ])('refuses the pattern %p, which is no RegExp', (pattern, shown) => {
      expect(refusal(untyped({ keyValidation: { pattern } }))).toBe(
        refusalMessage(
          `Invalid "keyValidation.pattern": ${shown}.`,
          'Give a RegExp.',
        ),
      );
    });
  });

  describe('fingerprint', () => {
    it.each([
      ['amount', '"amount"'],
      [42, '42'],
      [{ include: 'amount' }, '{"include":"amount"}'],
      [{ exclude: 'sentAt' }, '{"exclude":"sentAt"}'],
      [
        { include: ['amount'], exclude: { sentAt: true } },
        '{"include":["amount"],"exclude":{"sentAt":true}}',
      ],
    ])('refuses %p', (fingerprint, shown) => {
      expect(refusal(untyped({ fingerprint }))).toBe(
        refusalMessage(
          `Invalid "fingerprint": ${shown}.`,
          'Give { include?: string[], exclude?: string[] } or a function.',
        ),
      );
    });
  });

  describe('maxResponseSize', () => {
    it.each([
      [-1, '-1'],
      [1.5, '1.5'],
      ['1mb', '"1mb"'],
    ])('refuses %p', (maxResponseSize, shown) => {
      expect(refusal(untyped({ maxResponseSize }))).toBe(
        refusalMessage(
          `Invalid "maxResponseSize": ${shown}.`,
          'Give a whole number of bytes.',
        ),
      );
    });
  });

  describe('maxAttempts and deadLetter', () => {
    const deadLetter = () => undefined;

    it('keeps them together, per route over the module', () => {
      const module = resolveModuleOptions({ maxAttempts: 5, deadLetter });
      expect(module).toMatchObject({ maxAttempts: 5, deadLetter });
      expect(resolveRouteOptions(module, { maxAttempts: 2 })).toMatchObject({
        maxAttempts: 2,
        deadLetter,
      });
      expect(resolveModuleOptions({})).toMatchObject({
        maxAttempts: undefined,
        deadLetter: undefined,
      });
    });

    it.each([
      [0, '0'],
      [1.5, '1.5'],
      ['3', '"3"'],
    ])('refuses maxAttempts %p', (maxAttempts, shown) => {
      expect(refusal(untyped({ maxAttempts, deadLetter }))).toBe(
        refusalMessage(
          `Invalid "maxAttempts": ${shown}.`,
          'Give a whole number of attempts, 1 or more.',
        ),
      );
    });

    it.each([{ maxAttempts: 3 }, { deadLetter }])(
      'refuses one without the other: %p',
      (options) => {
        expect(refusal(options)).toBe(
          refusalMessage(
            '`maxAttempts` and `deadLetter` go together: a message that failed its attempts is handed to `deadLetter`.',
            'Give both (`maxAttempts: 5, deadLetter: (letter) => ...`), or neither.',
          ),
        );
      },
    );
  });

  describe('storeErrors', () => {
    it('stores every 4xx but 408, 425 and 429, and nothing else, when true', () => {
      const policy = resolveModuleOptions({ storeErrors: true }).storeErrors;
      expect(policy).toEqual(expect.any(Function));
      const stored = [
        200, 399, 400, 404, 408, 409, 422, 425, 429, 499, 500, 503,
      ].filter((status) => policy!(status, new Error('failed')));
      expect(stored).toEqual([400, 404, 409, 422, 499]);
    });

    it('stores nothing when false or not given', () => {
      expect(resolveModuleOptions({ storeErrors: false }).storeErrors).toBe(
        undefined,
      );
      expect(resolveModuleOptions({}).storeErrors).toBe(undefined);
    });

    it('keeps a function as the policy itself', () => {
      const policy: IdempotencyErrorPolicy = (status) => status === 503;
      expect(resolveModuleOptions({ storeErrors: policy }).storeErrors).toBe(
        policy,
      );
    });
  });

  describe('replayHeaders', () => {
    it('lower-cases the allowed and denied names', () => {
      const resolved = resolveModuleOptions({
        replayHeaders: {
          allow: ['X-Kept', 'Content-Type', 'ETAG'],
          deny: ['X-Request-Id', 'x-trace'],
        },
      });
      expect(resolved.replayAllow).toEqual(
        new Set(['x-kept', 'content-type', 'etag']),
      );
      expect(resolved.replayDeny).toEqual(new Set(['x-request-id', 'x-trace']));
    });

    it('allows no header at all for an empty allow list', () => {
      expect(
        resolveModuleOptions({ replayHeaders: { allow: [] } }).replayAllow,
      ).toEqual(new Set());
    });

    it('allows every header and denies none when not given', () => {
      const resolved = resolveModuleOptions({ replayHeaders: {} });
      expect(resolved.replayAllow).toBe(undefined);
      expect(resolved.replayDeny).toEqual(new Set());
    });

    it.each(['allow', 'deny'])(
      'refuses a %s that is no list of names',
      (list) => {
        for (const [names, shown] of [
          ['X-Kept', '"X-Kept"'],
          [['X-Kept', 1], '["X-Kept",1]'],
        ] as const) {
          expect(refusal(untyped({ replayHeaders: { [list]: names } }))).toBe(
            refusalMessage(
              `Invalid "replayHeaders.${list}": ${shown}.`,
              'Give an array of header names.',
            ),
          );
        }
      },
    );
  });
});

describe('resolveRouteOptions', () => {
  const moduleScope = () => 'tenant';
  const moduleValidate = (key: string) => key !== 'forbidden';
  const modulePolicy: IdempotencyErrorPolicy = (status) => status === 409;
  const base = resolveModuleOptions({
    ttl: '2h',
    concurrency: 'wait',
    scope: moduleScope,
    retryAfter: 3,
    keyValidation: {
      minLength: 4,
      pattern: /^[a-z]+$/,
      validate: moduleValidate,
    },
    storeErrors: modulePolicy,
    replayHeaders: { allow: ['X-Kept'], deny: ['X-Secret'] },
    gc: { batchSize: 10 },
    dataSource: 'payments',
  });

  it('keeps every module option a route does not override', () => {
    const resolved = resolveRouteOptions(base, {});
    expect(resolved).toEqual(base);
    expect(resolved).not.toBe(base);
    expect(resolved.scope).toBe(moduleScope);
    expect(resolved.storeErrors).toBe(modulePolicy);
    expect(resolved.keyValidation.validate).toBe(moduleValidate);
  });

  it('keeps the module-wide options a route cannot set', () => {
    const resolved = resolveRouteOptions(base, { ttl: '1m' });
    expect(resolved.gc).toEqual({
      intervalMs: 300_000,
      cron: undefined,
      batchSize: 10,
      maxDurationMs: 10_000,
    });
    expect(resolved.dataSource).toBe('payments');
    expect(resolved.headerField).toBe('idempotency-key');
  });

  it('overrides the module options it is given', () => {
    const scope = () => 'user';
    const resolved = resolveRouteOptions(base, {
      ttl: '1m',
      concurrency: 'reject',
      waitTimeout: '3s',
      transactionTimeout: 1000,
      scope,
      required: false,
      retryAfter: 0,
      maxResponseSize: 1024,
      acknowledge: true,
    });
    expect(resolved).toMatchObject({
      ttlMs: 60_000,
      concurrency: 'reject',
      waitTimeoutMs: 3000,
      transactionTimeoutMs: 1000,
      required: false,
      retryAfter: 0,
      maxResponseSize: 1024,
      acknowledge: true,
    });
    expect(resolved.scope).toBe(scope);
  });

  it('merges key rules over the module ones', () => {
    const resolved = resolveRouteOptions(base, {
      keyValidation: { maxLength: 36 },
    });
    expect(resolved.keyValidation).toEqual({
      minLength: 4,
      maxLength: 36,
      pattern: /^[a-z]+$/,
      validate: moduleValidate,
    });
  });

  it('checks the merged key rules', () => {
    expect(
      configurationError(() =>
        resolveRouteOptions(base, { keyValidation: { maxLength: 3 } }),
      ).message,
    ).toBe(
      refusalMessage(
        'Invalid "keyValidation": {"minLength":4,"maxLength":3}.',
        'Give whole numbers with 1 <= minLength <= maxLength <= 1024.',
      ),
    );
  });

  it.each([
    [true, [400, 404, 409, 499]],
    [undefined, [409]],
  ] as const)(
    'with storeErrors %p stores the statuses %p',
    (storeErrors, statuses) => {
      const policy = resolveRouteOptions(base, { storeErrors }).storeErrors;
      expect(
        [200, 400, 404, 409, 499, 500, 503].filter((status) =>
          policy!(status, undefined),
        ),
      ).toEqual(statuses);
    },
  );

  it('stores no error of a route with storeErrors false', () => {
    expect(resolveRouteOptions(base, { storeErrors: false }).storeErrors).toBe(
      undefined,
    );
  });

  it("replaces the module's header lists by the route's, each on its own", () => {
    const denyOnly = resolveRouteOptions(base, {
      replayHeaders: { deny: ['X-Other'] },
    });
    expect(denyOnly.replayAllow).toEqual(new Set(['x-kept']));
    expect(denyOnly.replayDeny).toEqual(new Set(['x-other']));

    const allowOnly = resolveRouteOptions(base, {
      replayHeaders: { allow: ['ETag'] },
    });
    expect(allowOnly.replayAllow).toEqual(new Set(['etag']));
    expect(allowOnly.replayDeny).toEqual(new Set(['x-secret']));
  });

  it.each<[IdempotentOptions, string]>([
    [{ ttl: '1 day' }, 'Invalid duration for "ttl": "1 day".'],
    [untyped({ concurrency: 'queue' }), 'Invalid "concurrency": "queue".'],
    [{ retryAfter: -2 }, 'Invalid "retryAfter": -2.'],
    [
      { keyValidation: { pattern: 'x' as unknown as RegExp } },
      'Invalid "keyValidation.pattern": "x".',
    ],
    [{ maxResponseSize: -5 }, 'Invalid "maxResponseSize": -5.'],
    [
      untyped({ replayHeaders: { deny: 'X-A' } }),
      'Invalid "replayHeaders.deny": "X-A".',
    ],
  ])('validates a route option as a module one: %p', (options, problem) => {
    const { message: text } = configurationError(() =>
      resolveRouteOptions(base, options),
    );
    expect(text.split('\n')[0]).toBe(problem);
  });

  it('leaves the resolved module options unchanged', () => {
    const snapshot = () => ({
      ...base,
      keyValidation: { ...base.keyValidation },
      replayAllow: new Set(base.replayAllow),
      replayDeny: new Set(base.replayDeny),
    });
    const before = snapshot();
    resolveRouteOptions(base, {
      ttl: '1m',
      keyValidation: { maxLength: 10 },
      replayHeaders: { allow: ['A'], deny: ['B'] },
      storeErrors: true,
    });
    expect(snapshot()).toEqual(before);
    expect(base.ttlMs).toBe(7_200_000);
    expect(base.keyValidation.maxLength).toBe(255);
  });
});
