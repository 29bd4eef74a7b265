import type { RetryOptions } from '../client/retry-policy.js';

/**
 * A `fetch` as the platform's: what {@link IdempotentFetchOptions.fetch}
 * takes (the platform's own, undici's, or `fetchFromHttpService()` over
 * `@nestjs/axios`).
 */
export type IdempotentFetchFunction = (
  input: string | URL,
  init?: RequestInit,
) => Promise<Response>;

/**
 * How `IdempotencyContext.fetch()` calls a downstream service: the module's
 * `outgoing` option, and the `idempotency` field of a call's init, which
 * overrides it field by field (`retry` as a whole).
 */
export interface IdempotentFetchOptions {
  /**
   * The header that carries the derived key to the downstream service.
   * @default 'Idempotency-Key'
   */
  readonly headerName?: string;
  /**
   * The response header whose value `true` (in any case) marks the
   * downstream's answer as a replay, the stored final outcome of the key:
   * an error answer so marked (even a 5xx) is final, never sent again. The
   * name the downstream service gives it (this module's own
   * `replayHeaderName` when it is one); matched in any case.
   * @default 'Idempotent-Replayed'
   */
  readonly replayHeaderName?: string;
  /**
   * How many times, and how long, a call is sent again (network errors,
   * timeouts, 409, 429, 5xx but 501 and 505), always with the same key:
   * exponential backoff with full jitter, or the answer's `Retry-After`. The
   * handler's deadline (`transactionTimeout`) bounds it too.
   * @default { attempts: 5, baseDelayMs: 100, maxDelayMs: 5000, deadlineMs: 30000 }
   */
  readonly retry?: RetryOptions;
  /**
   * How long one attempt may take, its answer's body included, in ms; past
   * it the attempt is aborted and counts as a network error.
   * @default 10000
   */
  readonly timeoutMs?: number;
  /**
   * The `fetch` the calls go through.
   * @default globalThis.fetch
   */
  readonly fetch?: IdempotentFetchFunction;
}

/**
 * The body of an outgoing call: one that is sent again byte for byte, a
 * string, bytes, a `Blob` or `URLSearchParams` (not a stream, read once;
 * not `FormData`, whose multipart boundary changes with each sending). Any
 * other body (a Node.js `Readable`, an async iterable) throws
 * `IdempotencyConfigurationError` before anything is sent.
 */
export type IdempotentFetchBody = Exclude<
  NonNullable<RequestInit['body']>,
  ReadableStream | FormData
>;

/**
 * The init of `IdempotencyContext.fetch()`: the platform's `RequestInit`,
 * with a body that can be sent again, and the call's own options.
 */
export interface IdempotentFetchInit extends Omit<RequestInit, 'body'> {
  /** The body, sent as it is with every attempt. */
  readonly body?: IdempotentFetchBody | null;
  /** This call's options, over the module's `outgoing` option. */
  readonly idempotency?: IdempotentFetchOptions;
}
