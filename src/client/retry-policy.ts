/*
 * The rules by which a caller of an idempotent API retries: which answers
 * may be sent again with the same key, and how long to wait first. Pure and
 * free of any platform import, so that browsers and server code share them.
 */

import { IDEMPOTENT_REPLAYED_HEADER } from './client.constants.js';

/** Options of the retries (all optional). */
export interface RetryOptions {
  /** Attempts in all, the first included. @default 5 */
  readonly attempts?: number;
  /** Ceiling of the first backoff, in ms; it doubles at each retry. @default 100 */
  readonly baseDelayMs?: number;
  /** Largest wait between two attempts, in ms, Retry-After included. @default 5000 */
  readonly maxDelayMs?: number;
  /** Time for all the attempts and waits, in ms from the first. @default 30000 */
  readonly deadlineMs?: number;
  /** Random number in [0, 1) for the jitter. @default Math.random */
  readonly random?: () => number;
}

/** {@link RetryOptions} with every default filled in, as {@link resolveRetryOptions} returns them. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- a name of its own for the resolved form
export interface ResolvedRetryOptions extends Required<RetryOptions> {}

/** The defaults of {@link RetryOptions}. */
export const RETRY_DEFAULTS: ResolvedRetryOptions = Object.freeze({
  attempts: 5,
  baseDelayMs: 100,
  maxDelayMs: 5000,
  deadlineMs: 30_000,
  random: Math.random,
});

/**
 * The longest delay a timer takes as it is: beyond it, `setTimeout` fires at
 * once instead of late.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Validates and fills in the defaults; throws a TypeError (clear message)
 * for a bad value.
 * @example resolveRetryOptions({ attempts: 3 }) // { attempts: 3, baseDelayMs: 100, ... }
 */
export function resolveRetryOptions(
  options: RetryOptions = {},
): ResolvedRetryOptions {
  const resolved: ResolvedRetryOptions = {
    attempts: options.attempts ?? RETRY_DEFAULTS.attempts,
    baseDelayMs: options.baseDelayMs ?? RETRY_DEFAULTS.baseDelayMs,
    maxDelayMs: options.maxDelayMs ?? RETRY_DEFAULTS.maxDelayMs,
    deadlineMs: options.deadlineMs ?? RETRY_DEFAULTS.deadlineMs,
    random: options.random ?? RETRY_DEFAULTS.random,
  };
  if (!Number.isInteger(resolved.attempts) || resolved.attempts < 1) {
    throw invalid('attempts', resolved.attempts, 'an integer of at least 1');
  }
  checkMilliseconds('baseDelayMs', resolved.baseDelayMs, 0);
  checkMilliseconds('maxDelayMs', resolved.maxDelayMs, 0);
  checkMilliseconds('deadlineMs', resolved.deadlineMs, 1);
  if (typeof resolved.random !== 'function') {
    throw invalid('random', resolved.random, 'a function');
  }
  return resolved;
}

/**
 * Throws unless `value` is a number of milliseconds from `min` to
 * {@link MAX_TIMER_MS}.
 * @internal shared with the client's own options
 */
export function checkMilliseconds(
  name: string,
  value: unknown,
  min: number,
): void {
  if (
    typeof value !== 'number' ||
    Number.isNaN(value) ||
    value < min ||
    value > MAX_TIMER_MS
  ) {
    throw invalid(
      name,
      value,
      `a number of milliseconds from ${min} to ${MAX_TIMER_MS}`,
    );
  }
}

function invalid(name: string, value: unknown, expected: string): TypeError {
  const shown = typeof value === 'function' ? 'a function' : String(value);
  return new TypeError(
    `The option "${name}" must be ${expected}; got ${shown}.`,
  );
}

/**
 * Whether a response with this status may be retried with the same key
 * (409, 429, 5xx except 501/505), given whether it was a replay
 * (`Idempotent-Replayed: true`, or the header the server renamed it to:
 * never, it is the stored final outcome).
 */
export function isRetryableStatus(status: number, replayed = false): boolean {
  if (replayed) {
    return false;
  }
  if (status === 409 || status === 429) {
    return true;
  }
  // Not Implemented and HTTP Version Not Supported say that the server will
  // never do it, however often it is asked.
  return status >= 500 && status <= 599 && status !== 501 && status !== 505;
}

/** Tags of the bodies other than strings and views that fetch sends the same way every time. */
const REPLAYABLE_TAGS = new Set([
  '[object ArrayBuffer]',
  '[object Blob]',
  '[object File]',
  '[object URLSearchParams]',
]);

/**
 * Whether fetch sends `body` the same way at every attempt: none, a string,
 * bytes (an `ArrayBuffer` or a view of one), a `Blob` or `URLSearchParams`.
 * Not a stream nor an iterable (read once), nor a `FormData` (a new
 * multipart boundary at each send), nor anything else.
 * @internal shared by the client and `IdempotencyContext.fetch()`
 */
export function isReplayableBody(body: unknown): boolean {
  return (
    body === undefined ||
    body === null ||
    typeof body === 'string' ||
    ArrayBuffer.isView(body) ||
    REPLAYABLE_TAGS.has(Object.prototype.toString.call(body))
  );
}

/**
 * Whether `url` is one an idempotent HTTP call may go to: its scheme is
 * `http:` or `https:`. fetch fails on most other schemes ("fetch failed",
 * which would be retried as a network error at every attempt) and answers
 * some without a server (a `data:` URL): neither is an HTTP answer.
 * @internal shared by the client and `IdempotencyContext.fetch()`
 */
export function isHttpUrl(url: URL): boolean {
  return url.protocol === 'http:' || url.protocol === 'https:';
}

/**
 * Whether a response says it is a replay, the stored final outcome of its
 * key: its replay header reads `true`, in any case.
 * @param headerName the name of the replay header, which a server may
 * rename (the module's `replayHeaderName`); matched in any case.
 * @default 'Idempotent-Replayed'
 * @internal shared by the client and `IdempotencyContext.fetch()`
 */
export function isReplayed(
  headers: Headers,
  headerName: string = IDEMPOTENT_REPLAYED_HEADER,
): boolean {
  return headers.get(headerName)?.trim().toLowerCase() === 'true';
}

const MONTHS = 'Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec';
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})';
/** IMF-fixdate, the form servers send (`Sun, 06 Nov 1994 08:49:37 GMT`). */
const IMF_FIXDATE = new RegExp(
  `^[A-Z][a-z]{2}, (\\d{2}) (${MONTHS}) (\\d{4}) ${TIME} GMT$`,
);
/** The obsolete form of RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`), still to be read. */
const RFC_850 = new RegExp(
  `^[A-Z][a-z]{5,8}, (\\d{2})-(${MONTHS})-(\\d{2}) ${TIME} GMT$`,
);
/** The obsolete form of C's asctime (`Sun Nov  6 08:49:37 1994`), still to be read. */
const ASCTIME = new RegExp(
  `^[A-Z][a-z]{2} (${MONTHS}) ([ \\d]\\d) ${TIME} (\\d{4})$`,
);

/**
 * Reads an HTTP-date in UTC milliseconds, or undefined. Parsed by hand:
 * `Date.parse` reads far more than HTTP-dates, and differently per engine.
 */
function parseHttpDate(value: string, now: number): number | undefined {
  let parts: [string, string, string, string, string, string] | undefined;
  let match = IMF_FIXDATE.exec(value);
  if (match) {
    const [, day, month, year, hour, minute, second] = match;
    parts = [year, month, day, hour, minute, second];
  } else if ((match = RFC_850.exec(value))) {
    const [, day, month, year, hour, minute, second] = match;
    // A year of two digits that would land more than half a century ahead
    // belongs to the century before.
    const thisYear = new Date(now).getUTCFullYear();
    let fullYear = thisYear - (thisYear % 100) + Number(year);
    if (fullYear > thisYear + 50) {
      fullYear -= 100;
    }
    parts = [String(fullYear), month, day, hour, minute, second];
  } else if ((match = ASCTIME.exec(value))) {
    const [, month, day, hour, minute, second, year] = match;
    parts = [year, month, day.trim(), hour, minute, second];
  }
  if (!parts) {
    return undefined;
  }
  const [year, day, hour, minute, second] = [
    parts[0],
    parts[2],
    parts[3],
    parts[4],
    parts[5],
  ].map(Number);
  if (day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return undefined;
  }
  const month = MONTHS.split('|').indexOf(parts[1]);
  return Date.UTC(year, month, day, hour, minute, second);
}

/**
 * Retry-After (delta-seconds or HTTP-date) in ms from `now`, or undefined
 * when absent or unparseable. A date in the past is 0.
 * @param now epoch ms to count a date from. @default Date.now()
 * @example parseRetryAfter('2') // 2000
 */
export function parseRetryAfter(
  value: string | null | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value === null || value === undefined) {
    return undefined;
  }
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) {
    return Number(trimmed) * 1000;
  }
  const date = parseHttpDate(trimmed, now);
  return date === undefined ? undefined : Math.max(0, date - now);
}

/**
 * The wait before retry number `retry` (1 for the first retry): Retry-After
 * when given (capped by maxDelayMs), else full jitter:
 * random() * min(maxDelayMs, baseDelayMs * 2 ** (retry - 1)).
 */
export function retryDelay(
  retry: number,
  options: ResolvedRetryOptions,
  retryAfterMs?: number,
): number {
  if (!Number.isInteger(retry) || retry < 1) {
    throw new TypeError(
      `The retry number must be an integer of at least 1; got ${retry}.`,
    );
  }
  if (retryAfterMs !== undefined) {
    return Math.min(options.maxDelayMs, Math.max(0, retryAfterMs));
  }
  // Zero times an overflowed power would be NaN, not zero.
  const ceiling =
    options.baseDelayMs === 0
      ? 0
      : Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (retry - 1));
  return options.random() * ceiling;
}

/**
 * Whether an error thrown by fetch is a network failure worth retrying (not
 * the caller's abort): fetch rejects with a TypeError when no response came
 * back ("fetch failed" in Node.js, "Failed to fetch", "Load failed",
 * "NetworkError when attempting to fetch resource." in browsers, "error
 * sending request for url …" in Deno: the messages are not standardized,
 * the type is), and with the abort's reason (an AbortError, a TimeoutError,
 * or what the caller gave) when its signal aborted. It also rejects with a
 * TypeError when it cannot build the request (a URL with credentials or
 * that does not parse, a GET or HEAD with a body, an invalid header),
 * which would fail the same way at every attempt, and with a TypeError
 * for a scheme it cannot fetch (`ftp:`, `file:`): the callers build the
 * request with `new Request()` and check its scheme before the first
 * attempt, so that such an error is thrown at once and never reaches this.
 * Node.js's fetch also builds, then refuses to send, at every attempt, a
 * request with a header it does not send (`Expect`, `Transfer-Encoding`,
 * `Upgrade`, `Keep-Alive`) or a `Content-Length` that is not the body's:
 * its TypeError then has a cause with one of undici's codes (see
 * {@link isRefusedByFetch}), and is not a network failure.
 */
export function isNetworkError(error: unknown): boolean {
  // By name, not `instanceof`: the error may come from another realm (a
  // frame, a worker, a test runner's context).
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { name?: unknown }).name === 'TypeError' &&
    !isRefusedByFetch(error)
  );
}

/**
 * Codes of undici's errors (Node.js's fetch) for a request that it will
 * not send, the same way at every attempt, nothing sent: an invalid or
 * unsupported header (`Transfer-Encoding`, `Upgrade`, `Keep-Alive`;
 * `Expect`), a `Content-Length` that is not the body's.
 */
const REFUSED_CODES = new Set([
  'UND_ERR_INVALID_ARG',
  'UND_ERR_NOT_SUPPORTED',
  'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH',
]);

/**
 * Whether `error`, thrown by fetch, says that it refused to send the
 * request, as it would at every attempt (not a network failure): fetch's
 * TypeError whose cause has one of undici's codes for it.
 * @internal shared by the client and `IdempotencyContext.fetch()`
 */
export function isRefusedByFetch(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  return (
    (error as { name?: unknown } | null)?.name === 'TypeError' &&
    typeof cause === 'object' &&
    cause !== null &&
    typeof cause.code === 'string' &&
    REFUSED_CODES.has(cause.code)
  );
}
