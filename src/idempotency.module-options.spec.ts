import type { ExecutionContext } from '@nestjs/common';
import { FETCH_DEFAULTS } from './outgoing/outgoing.options.js';
import { resolveModuleOptions } from './idempotency.module-options.js';
import {
  refusalMessage,
  refusal,
  untyped,
} from '../test/utils/option-refusals.js';

/** A context for resolvers that never look at it. */
const context = {} as ExecutionContext;

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
        replayHeaderName: 'Idempotent-Replayed',
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
        refusalMessage(
          `Invalid duration for "${option}": ${shown}.`,
          "Give a positive number of milliseconds or a string such as '500ms', '30s', '15m', '24h' or '7d'.",
        ),
      );
    },
  );

  it.each([
    ['transactionTimeout', { transactionTimeout: '25d' }, '"25d"'],
    ['waitTimeout', { waitTimeout: 2_147_483_648 }, '2147483648'],
    ['lease', { lease: '30d' }, '"30d"'],
    ['gc.interval', { gc: { interval: '25d' } }, '"25d"'],
  ])(
    'refuses for %s a duration a Node.js timer cannot wait (it would fire at once)',
    (option, options, shown) => {
      expect(refusal(options)).toBe(
        refusalMessage(
          `Invalid duration for "${option}": ${shown} is longer than 2147483647 ms, the longest a Node.js timer waits (a longer one would fire at once).`,
          "Give at most 2147483647 ms ('24d').",
        ),
      );
    },
  );

  it('takes a ttl longer than a timer waits: nothing waits for it', () => {
    expect(resolveModuleOptions({ ttl: '90d' }).ttlMs).toBe(90 * 86_400_000);
    expect(
      resolveModuleOptions({ transactionTimeout: '24d' }).transactionTimeoutMs,
    ).toBe(24 * 86_400_000);
  });

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
        refusalMessage(
          `Invalid "telemetry": ${JSON.stringify(telemetry)}.`,
          "Give true, false or { keys: 'hash' }.",
        ),
      );
    });

    it('refuses keys it does not know', () => {
      expect(refusal(untyped({ telemetry: { keys: 'plain' } }))).toBe(
        refusalMessage(
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
        refusalMessage(
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
        refusalMessage(
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
        refusalMessage(
          `Invalid "problemTypeBaseUrl": ${shown}.`,
          "Give an absolute URL such as 'https://docs.example.com/errors/' (the problem's slug is appended to it).",
        ),
      );
    });
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
        refusalMessage(
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
        refusalMessage(
          `Invalid "gc.cron": ${shown}.`,
          "Give a cron expression such as '0 * * * *'.",
        ),
      );
    });
  });
});
