import fc from 'fast-check';
import {
  isNetworkError,
  isReplayed,
  isRetryableStatus,
  parseRetryAfter,
  resolveRetryOptions,
  RETRY_DEFAULTS,
  retryDelay,
  type ResolvedRetryOptions,
} from './retry-policy.js';

describe('resolveRetryOptions', () => {
  it('fills in the defaults', () => {
    expect(resolveRetryOptions()).toEqual({
      attempts: 5,
      baseDelayMs: 100,
      maxDelayMs: 5000,
      deadlineMs: 30_000,
      random: Math.random,
    });
    expect(resolveRetryOptions({})).toEqual(RETRY_DEFAULTS);
  });

  it('keeps what is given, zero delays included', () => {
    const random = () => 0.5;
    expect(
      resolveRetryOptions({
        attempts: 1,
        baseDelayMs: 0,
        maxDelayMs: 0,
        deadlineMs: 1,
        random,
      }),
    ).toEqual({
      attempts: 1,
      baseDelayMs: 0,
      maxDelayMs: 0,
      deadlineMs: 1,
      random,
    });
  });

  it.each([
    [{ attempts: 0 }, /"attempts" must be an integer of at least 1; got 0\./],
    [
      { attempts: 2.5 },
      /"attempts" must be an integer of at least 1; got 2\.5/,
    ],
    [{ attempts: Number.NaN }, /"attempts" .* got NaN/],
    [{ baseDelayMs: -1 }, /"baseDelayMs" must be a number of milliseconds/],
    [{ maxDelayMs: Number.NaN }, /"maxDelayMs" .* got NaN/],
    [{ maxDelayMs: Infinity }, /"maxDelayMs" .* got Infinity/],
    [{ deadlineMs: 0 }, /"deadlineMs" must be a number of milliseconds from 1/],
    [{ deadlineMs: 2 ** 31 }, /"deadlineMs" .* to 2147483647; got 2147483648/],
    [{ deadlineMs: '30s' as unknown as number }, /"deadlineMs" .* got 30s/],
    [{ random: 0.5 as unknown as () => number }, /"random" must be a function/],
  ])('refuses %p with a TypeError naming the option', (options, message) => {
    expect(() => resolveRetryOptions(options)).toThrow(TypeError);
    expect(() => resolveRetryOptions(options)).toThrow(message);
  });
});

describe('isRetryableStatus', () => {
  it.each([409, 429, 500, 502, 503, 504, 507, 599])('retries %p', (status) => {
    expect(isRetryableStatus(status)).toBe(true);
    expect(isRetryableStatus(status, false)).toBe(true);
  });

  it.each([
    200, 201, 204, 301, 304, 400, 401, 403, 404, 408, 410, 422, 501, 505,
  ])('stops at %p', (status) => {
    expect(isRetryableStatus(status)).toBe(false);
  });

  it.each([409, 429, 500, 503])('never retries a replayed %p', (status) => {
    expect(isRetryableStatus(status, true)).toBe(false);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.UTC(2026, 0, 15, 12, 0, 0);

  it.each([
    ['0', 0],
    ['1', 1000],
    ['120', 120_000],
    [' 3 ', 3000],
  ])('reads delta-seconds %p as %p ms', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });

  it('reads the three forms of HTTP-date, from now', () => {
    expect(parseRetryAfter('Thu, 15 Jan 2026 12:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Thursday, 15-Jan-26 12:01:00 GMT', now)).toBe(
      60_000,
    );
    expect(parseRetryAfter('Thu Jan 15 12:00:02 2026', now)).toBe(2000);
    expect(parseRetryAfter('Thu Jan  1 00:00:00 2026', now)).toBe(0);
  });

  it('reads a two-digit year far ahead as of the century before', () => {
    // Read in this century, the first would lie more than half a century
    // ahead: it is of the century before, long past.
    expect(parseRetryAfter('Friday, 31-Dec-99 23:59:59 GMT', now)).toBe(0);
    expect(parseRetryAfter('Thursday, 15-Jan-76 12:00:00 GMT', now)).toBe(
      Date.UTC(2076, 0, 15, 12) - now,
    );
  });

  it('reads a date in the past as 0', () => {
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:37 GMT', now)).toBe(0);
  });

  it('counts from Date.now() by default', () => {
    const inAMinute = new Date(Date.now() + 60_000).toUTCString();
    const delay = parseRetryAfter(inAMinute)!;
    // The date has whole seconds: up to one second less than a minute.
    expect(delay).toBeGreaterThan(58_000);
    expect(delay).toBeLessThanOrEqual(60_000);
  });

  it.each([
    null,
    undefined,
    '',
    '-1',
    '1.5',
    '1e3',
    'soon',
    '2 3',
    'Thu, 15 Jan 2026 12:00:30 UTC',
    'Thu, 32 Jan 2026 12:00:30 GMT',
    'Thu, 15 Jan 2026 24:00:30 GMT',
    'Thu, 15 Foo 2026 12:00:30 GMT',
    '2026-01-15T12:00:30Z',
  ])('reads %p as undefined', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined();
  });
});

describe('retryDelay', () => {
  const options = (random: number): ResolvedRetryOptions =>
    resolveRetryOptions({
      baseDelayMs: 100,
      maxDelayMs: 1000,
      random: () => random,
    });

  it('draws in a ceiling that doubles at each retry, up to maxDelayMs', () => {
    const top = options(0.999);
    expect(
      [1, 2, 3, 4, 5, 6, 40].map((retry) => retryDelay(retry, top)),
    ).toEqual([99.9, 199.8, 399.6, 799.2, 999, 999, 999]);
    const half = options(0.5);
    expect([1, 2, 3].map((retry) => retryDelay(retry, half))).toEqual([
      50, 100, 200,
    ]);
    expect(retryDelay(3, options(0))).toBe(0);
    // A zero base stays zero once the power overflows.
    const none = resolveRetryOptions({ baseDelayMs: 0, random: () => 0.5 });
    expect(
      [1, 1024, 1025, 5000].map((retry) => retryDelay(retry, none)),
    ).toEqual([0, 0, 0, 0]);
  });

  it('waits what Retry-After asks, capped by maxDelayMs, without jitter', () => {
    const resolved = options(0.5);
    expect(retryDelay(1, resolved, 0)).toBe(0);
    expect(retryDelay(4, resolved, 700)).toBe(700);
    expect(retryDelay(1, resolved, 60_000)).toBe(1000);
  });

  it('stays within [0, min(maxDelayMs, baseDelayMs * 2 ** (retry - 1))]', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (retry, baseDelayMs, maxDelayMs, random) => {
          const delay = retryDelay(
            retry,
            resolveRetryOptions({
              baseDelayMs,
              maxDelayMs,
              random: () => random,
            }),
          );
          // No delay at all from a zero base, however large the power.
          const ceiling =
            baseDelayMs === 0
              ? 0
              : Math.min(maxDelayMs, baseDelayMs * 2 ** (retry - 1));
          return delay >= 0 && delay <= ceiling && Number.isFinite(delay);
        },
      ),
    );
  });

  it.each([0, -1, 1.5])('refuses the retry number %p', (retry) => {
    expect(() => retryDelay(retry, options(0.5))).toThrow(TypeError);
  });
});

describe('isNetworkError', () => {
  it("takes fetch's TypeError for a network failure, whatever its realm", () => {
    expect(
      isNetworkError(new TypeError('fetch failed', { cause: new Error('x') })),
    ).toBe(true);
    expect(isNetworkError(new TypeError('Failed to fetch'))).toBe(true);
    expect(isNetworkError({ name: 'TypeError', message: 'Load failed' })).toBe(
      true,
    );
    expect(
      isNetworkError(
        new TypeError(
          'error sending request for url (https://api.example.com/x): client error (Connect)',
        ),
      ),
    ).toBe(true);
  });

  it('leaves out an abort, a timeout and anything else', () => {
    expect(
      isNetworkError(
        new DOMException('The operation was aborted.', 'AbortError'),
      ),
    ).toBe(false);
    expect(
      isNetworkError(
        new DOMException('The operation timed out.', 'TimeoutError'),
      ),
    ).toBe(false);
    const aborted = new AbortController();
    aborted.abort();
    expect(isNetworkError(aborted.signal.reason)).toBe(false);
    expect(isNetworkError(new Error('fetch failed'))).toBe(false);
    expect(isNetworkError(new RangeError('x'))).toBe(false);
    expect(isNetworkError('TypeError')).toBe(false);
    expect(isNetworkError(null)).toBe(false);
    expect(isNetworkError(undefined)).toBe(false);
  });

  it("leaves out the TypeError of Node.js's fetch refusing to send what it built", () => {
    const refused = (code: string, message: string) =>
      new TypeError('fetch failed', {
        cause: Object.assign(new Error(message), { code }),
      });
    expect([
      isNetworkError(
        refused('UND_ERR_NOT_SUPPORTED', 'expect header not supported'),
      ),
      isNetworkError(
        refused('UND_ERR_INVALID_ARG', 'invalid transfer-encoding header'),
      ),
      isNetworkError(
        refused(
          'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
          'Request body length does not match content-length header',
        ),
      ),
      // A failure on the way stays one.
      isNetworkError(refused('UND_ERR_SOCKET', 'other side closed')),
      isNetworkError(refused('ECONNREFUSED', 'connect ECONNREFUSED')),
    ]).toEqual([false, false, false, true, true]);
  });
});

describe('isReplayed', () => {
  it.each([
    ['true', true],
    ['True', true],
    [' TRUE ', true],
    ['false', false],
    ['1', false],
    ['', false],
  ])('reads Idempotent-Replayed: %p as %p', (value, replayed) => {
    expect(isReplayed(new Headers({ 'Idempotent-Replayed': value }))).toBe(
      replayed,
    );
  });

  it('is false without the header', () => {
    expect(isReplayed(new Headers())).toBe(false);
  });

  it('reads the header under the name given, in any case', () => {
    const headers = new Headers({ 'Idempotency-Replayed': 'true' });
    expect(isReplayed(headers, 'idempotency-replayed')).toBe(true);
    expect(isReplayed(headers, 'IDEMPOTENCY-REPLAYED')).toBe(true);
    expect(isReplayed(headers)).toBe(false);
    expect(
      isReplayed(new Headers({ 'Idempotent-Replayed': 'true' }), 'X-Replayed'),
    ).toBe(false);
  });
});
