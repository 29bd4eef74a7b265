import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import { FETCH_DEFAULTS } from './outgoing/outgoing.options.js';
import type {
  IdempotencyErrorPolicy,
  IdempotencyModuleOptions,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
import {
  resolveModuleOptions,
  resolveRouteOptions,
} from './idempotency.options.js';

/** A context for resolvers that never look at it. */
const context = {} as ExecutionContext;

/** The error `resolve` throws; fails the test when it throws none or another. */
function configurationError(resolve: () => unknown): Error {
  try {
    resolve();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).name).toBe('IdempotencyConfigurationError');
    return error as Error;
  }
  throw new Error('expected an IdempotencyConfigurationError, got none');
}

/** The message of an IdempotencyConfigurationError. */
function message(problem: string, solution: string): string {
  return `${problem}\nPotential solutions:\n- ${solution}`;
}

/** The message of the error that `resolveModuleOptions(options)` throws. */
function refusal(options: IdempotencyModuleOptions): string {
  return configurationError(() => resolveModuleOptions(options)).message;
}

/** Options the type system refuses, as a JavaScript caller may give them. */
function untyped(options: Record<string, unknown>): IdempotencyModuleOptions {
  return options as IdempotencyModuleOptions;
}

describe('resolveModuleOptions', () => {
  it('applies every default when given nothing', () => {
    const resolved = resolveModuleOptions();
    expect(resolved).toEqual({
      gc: {
        intervalMs: 300_000,
        cron: undefined,
        batchSize: 1000,
        maxDurationMs: 10_000,
      },
      onEvent: undefined,
      dataSource: undefined,
      headerName: 'Idempotency-Key',
      headerField: 'idempotency-key',
      replayHeaderName: 'Idempotent-Replayed',
      problemTypeBaseUrl: undefined,
      leaseMs: 15_000,
      presence: true,
      openApi: true,
      telemetry: { keys: 'hash' },
      outgoing: {
        headerName: 'Idempotency-Key',
        retry: {
          attempts: 5,
          baseDelayMs: 100,
          maxDelayMs: 5_000,
          deadlineMs: 30_000,
          random: Math.random,
        },
        timeoutMs: 10_000,
        fetch: undefined,
      },
      ttlMs: 86_400_000,
      concurrency: 'reject',
      waitTimeoutMs: 10_000,
      transactionTimeoutMs: 30_000,
      scope: expect.any(Function),
      required: true,
      retryAfter: 1,
      key: undefined,
      keyValidation: {
        minLength: 1,
        maxLength: 255,
        pattern: /^[\x21-\x7e]+$/,
        validate: undefined,
      },
      fingerprint: {},
      storeErrors: undefined,
      maxResponseSize: 1_048_576,
      replayAllow: undefined,
      replayDeny: new Set(),
      acknowledge: false,
    });
    expect(resolved.scope(context)).toBe('global');
  });

  it('gives the same defaults for an empty object', () => {
    const fromEmpty = resolveModuleOptions({});
    expect(fromEmpty).toEqual(resolveModuleOptions());
    expect(fromEmpty.scope).toBe(resolveModuleOptions().scope);
  });

  it('takes every option given over its default', () => {
    const scope = () => 'tenant-1';
    const key = () => 'derived';
    const fingerprint = () => 'fp';
    const validate = (value: string) => value.startsWith('k');
    const onEvent = () => undefined;
    const resolved = resolveModuleOptions({
      ttl: '1h',
      concurrency: 'wait',
      waitTimeout: 2500,
      transactionTimeout: '5s',
      scope,
      required: false,
      retryAfter: 0,
      key,
      keyValidation: {
        minLength: 8,
        maxLength: 64,
        pattern: /^k[a-z0-9]+$/,
        validate,
      },
      fingerprint,
      maxResponseSize: 0,
      acknowledge: true,
      onEvent,
      dataSource: 'payments',
      headerName: 'X-Request-Key',
      replayHeaderName: 'Idempotency-Replayed',
      problemTypeBaseUrl: 'https://docs.example.com/errors/',
      gc: false,
      lease: '3s',
      presence: { url: 'postgres://direct/db' },
      openApi: false,
      telemetry: { keys: 'raw' },
      outgoing: { headerName: 'X-Downstream-Key', timeoutMs: 2_000 },
    });
    expect(resolved).toEqual({
      gc: undefined,
      onEvent,
      dataSource: 'payments',
      headerName: 'X-Request-Key',
      headerField: 'x-request-key',
      replayHeaderName: 'Idempotency-Replayed',
      problemTypeBaseUrl: 'https://docs.example.com/errors/',
      leaseMs: 3_000,
      presence: { url: 'postgres://direct/db' },
      openApi: false,
      telemetry: { keys: 'raw' },
      outgoing: {
        ...FETCH_DEFAULTS,
        headerName: 'X-Downstream-Key',
        timeoutMs: 2_000,
      },
      ttlMs: 3_600_000,
      concurrency: 'wait',
      waitTimeoutMs: 2500,
      transactionTimeoutMs: 5000,
      scope,
      required: false,
      retryAfter: 0,
      key,
      keyValidation: {
        minLength: 8,
        maxLength: 64,
        pattern: /^k[a-z0-9]+$/,
        validate,
      },
      fingerprint,
      storeErrors: undefined,
      maxResponseSize: 0,
      replayAllow: undefined,
      replayDeny: new Set(),
      acknowledge: true,
    });
    expect(resolved.scope).toBe(scope);
    expect(resolved.key).toBe(key);
    expect(resolved.fingerprint).toBe(fingerprint);
    expect(resolved.keyValidation.validate).toBe(validate);
    expect(resolved.onEvent).toBe(onEvent);
  });

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

  it.each([
    ['ttl', { ttl: 'forever' }, '"forever"'],
    ['waitTimeout', { waitTimeout: 0 }, '0'],
    ['transactionTimeout', { transactionTimeout: '30' }, '"30"'],
    ['gc.interval', { gc: { interval: -5 } }, '-5'],
    ['gc.maxDuration', { gc: { maxDuration: '1 week' } }, '"1 week"'],
  ])(
    'refuses an invalid duration for %s, naming the option',
    (option, options, shown) => {
      expect(refusal(options)).toBe(
        message(
          `Invalid duration for "${option}": ${shown}.`,
          "Give a positive number of milliseconds or a string such as '500ms', '30s', '15m', '24h' or '7d'.",
        ),
      );
    },
  );

  describe('lease', () => {
    it('takes a duration of 300 ms or more', () => {
      expect(resolveModuleOptions({ lease: 300 }).leaseMs).toBe(300);
      expect(resolveModuleOptions({ lease: '30s' }).leaseMs).toBe(30_000);
    });

    it('refuses a shorter lease, saying what to give', () => {
      expect(() => resolveModuleOptions({ lease: '100ms' })).toThrow(
        /Invalid "lease": "100ms"\..*Give a lease of 300 ms or more/s,
      );
    });
  });

  describe('presence', () => {
    it('takes true, false or a URL', () => {
      expect(resolveModuleOptions({ presence: false }).presence).toBe(false);
      expect(resolveModuleOptions({ presence: true }).presence).toBe(true);
    });

    it.each([[{ url: '' }], [{}], ['postgres://x'], [1]])(
      'refuses %p',
      (presence) => {
        expect(() =>
          resolveModuleOptions({ presence } as unknown as {
            presence: boolean;
          }),
        ).toThrow(/Invalid "presence".*Give true, false or \{ url: string \}/s);
      },
    );
  });

  it.each([['yes'], [1], ['false']])('refuses openApi: %p', (openApi) => {
    expect(() =>
      resolveModuleOptions({ openApi } as unknown as { openApi: boolean }),
    ).toThrow(/Invalid "openApi".*Give true or false/s);
  });

  describe('telemetry', () => {
    it('takes true, false or the way spans carry keys', () => {
      expect(resolveModuleOptions({ telemetry: true }).telemetry).toEqual({
        keys: 'hash',
      });
      expect(resolveModuleOptions({ telemetry: {} }).telemetry).toEqual({
        keys: 'hash',
      });
      expect(resolveModuleOptions({ telemetry: false }).telemetry).toBe(false);
      for (const keys of ['hash', 'raw', 'none'] as const) {
        expect(resolveModuleOptions({ telemetry: { keys } }).telemetry).toEqual(
          { keys },
        );
      }
    });

    it.each([['on'], [1], [null]])('refuses %p', (telemetry) => {
      expect(refusal(untyped({ telemetry }))).toBe(
        message(
          `Invalid "telemetry": ${JSON.stringify(telemetry)}.`,
          "Give true, false or { keys: 'hash' }.",
        ),
      );
    });

    it('refuses keys it does not know', () => {
      expect(refusal(untyped({ telemetry: { keys: 'plain' } }))).toBe(
        message(
          'Invalid "telemetry.keys": "plain".',
          "Use 'hash', 'raw' or 'none'.",
        ),
      );
    });
  });

  describe('headerName', () => {
    it.each([
      'Idempotency-Key',
      'X-Request-Key',
      'idem_key',
      "x!#$%&'*+.^`|~1",
    ])('accepts the header name %p', (headerName) => {
      const resolved = resolveModuleOptions({ headerName });
      expect(resolved.headerName).toBe(headerName);
      expect(resolved.headerField).toBe(headerName.toLowerCase());
    });

    it.each([
      ['', '""'],
      ['Idempotency Key', '"Idempotency Key"'],
      ['Idempotency-Key:', '"Idempotency-Key:"'],
      ['Clé', '"Clé"'],
      ['Key\n', '"Key\\n"'],
    ])('refuses the header name %p', (headerName, shown) => {
      expect(refusal({ headerName })).toBe(
        message(
          `Invalid "headerName": ${shown}.`,
          "Give an HTTP header name such as 'Idempotency-Key'.",
        ),
      );
    });
  });

  describe('replayHeaderName', () => {
    it.each(['Idempotency-Replayed', 'X-Replayed', 'replayed_1'])(
      'accepts the header name %p',
      (replayHeaderName) => {
        expect(
          resolveModuleOptions({ replayHeaderName }).replayHeaderName,
        ).toBe(replayHeaderName);
      },
    );

    it.each([
      ['', '""'],
      ['Idempotent Replayed', '"Idempotent Replayed"'],
      ['Replayed:', '"Replayed:"'],
      ['Content-Type', '"Content-Type"'],
      ['idempotent-body-omitted', '"idempotent-body-omitted"'],
    ])('refuses the header name %p', (replayHeaderName, shown) => {
      expect(refusal({ replayHeaderName })).toBe(
        message(
          `Invalid "replayHeaderName": ${shown}.`,
          "Give an HTTP header name of its own such as 'Idempotent-Replayed' or 'Idempotency-Replayed'.",
        ),
      );
    });
  });

  describe('problemTypeBaseUrl', () => {
    it.each([
      'https://docs.example.com/errors/',
      'https://docs.example.com/errors#',
      'http://localhost:3000/problems/',
    ])('accepts the absolute URL %p', (problemTypeBaseUrl) => {
      expect(
        resolveModuleOptions({ problemTypeBaseUrl }).problemTypeBaseUrl,
      ).toBe(problemTypeBaseUrl);
    });

    it.each([
      ['/errors/', '"/errors/"'],
      ['docs.example.com/errors/', '"docs.example.com/errors/"'],
      ['', '""'],
      [42, '42'],
    ])('refuses %p', (problemTypeBaseUrl, shown) => {
      expect(refusal(untyped({ problemTypeBaseUrl }))).toBe(
        message(
          `Invalid "problemTypeBaseUrl": ${shown}.`,
          "Give an absolute URL such as 'https://docs.example.com/errors/' (the problem's slug is appended to it).",
        ),
      );
    });
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
        message(`Invalid "concurrency": ${shown}.`, "Use 'reject' or 'wait'."),
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
        message(
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
        message(
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
        message(`Invalid "keyValidation.pattern": ${shown}.`, 'Give a RegExp.'),
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
        message(
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
        message(
          `Invalid "maxResponseSize": ${shown}.`,
          'Give a whole number of bytes.',
        ),
      );
    });
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
            message(
              `Invalid "replayHeaders.${list}": ${shown}.`,
              'Give an array of header names.',
            ),
          );
        }
      },
    );
  });

  describe('gc', () => {
    it('is disabled by false', () => {
      expect(resolveModuleOptions({ gc: false }).gc).toBe(undefined);
    });

    it('applies its defaults to an empty object', () => {
      expect(resolveModuleOptions({ gc: {} }).gc).toEqual({
        intervalMs: 300_000,
        cron: undefined,
        batchSize: 1000,
        maxDurationMs: 10_000,
      });
    });

    it('takes the options given', () => {
      expect(
        resolveModuleOptions({
          gc: {
            interval: '1m',
            cron: '0 * * * *',
            batchSize: 50,
            maxDuration: 2000,
          },
        }).gc,
      ).toEqual({
        intervalMs: 60_000,
        cron: '0 * * * *',
        batchSize: 50,
        maxDurationMs: 2000,
      });
    });

    it.each([
      [0, '0'],
      [-10, '-10'],
      [2.5, '2.5'],
      ['100', '"100"'],
    ])('refuses the batch size %p', (batchSize, shown) => {
      expect(refusal(untyped({ gc: { batchSize } }))).toBe(
        message(
          `Invalid "gc.batchSize": ${shown}.`,
          'Give a whole number of rows, 1 or more.',
        ),
      );
    });

    it.each([
      ['', '""'],
      ['   ', '"   "'],
      [5, '5'],
    ])('refuses the cron expression %p', (cron, shown) => {
      expect(refusal(untyped({ gc: { cron } }))).toBe(
        message(
          `Invalid "gc.cron": ${shown}.`,
          "Give a cron expression such as '0 * * * *'.",
        ),
      );
    });
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
      message(
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
