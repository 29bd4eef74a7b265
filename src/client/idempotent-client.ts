import {
  DEFAULT_ATTEMPT_TIMEOUT_MS,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
} from './client.constants.js';
import type {
  FetchFunction,
  IdempotentClientOptions,
  IdempotentRequestInit,
  IdempotentResult,
} from './idempotent-client.options.js';
import { RetriesExhaustedError } from './retries-exhausted.error.js';
import {
  checkMilliseconds,
  isHttpUrl,
  isNetworkError,
  isReplayableBody,
  isReplayed,
  isRetryableStatus,
  parseRetryAfter,
  resolveRetryOptions,
  retryDelay,
  type ResolvedRetryOptions,
} from './retry-policy.js';

/** How one attempt ended: with a response, or without one and why. */
interface Attempt {
  readonly response?: Response;
  /** Whether the response says it is a replay. */
  readonly replayed: boolean;
  /** Why no response came back. */
  readonly error?: unknown;
  /** Whether the deadline, not the attempt's own time, cut it short. */
  readonly deadline: boolean;
}

/**
 * A client of an idempotent HTTP API: it sends each logical operation under
 * one idempotency key, and sends it again, with the same key, method and
 * body, while the answers say "try again": no response (a dropped
 * connection, a timeout), 409 (the key is in progress; a 409 of the
 * operation itself cannot be told apart, and is retried too), 429, and 5xx
 * except 501 and 505, unless the response is a replay (its
 * `replayHeaderName` header reads `true`). Waits follow `Retry-After`
 * when given, else exponential backoff with full jitter. Any other
 * response ends the operation and is returned as it is. Browser-safe: it
 * needs only `fetch`, `AbortController` and `crypto.randomUUID()`.
 *
 * @example
 * const client = new IdempotentClient({ attempts: 5, deadlineMs: 30_000 });
 * const { response, key, replayed } = await client.send(`${api}/payments`, {
 *   headers: { 'content-type': 'application/json' },
 *   body: JSON.stringify({ amount: 1000, currency: 'EUR' }),
 * });
 */
export class IdempotentClient {
  private readonly retry: ResolvedRetryOptions;
  private readonly headerName: string;
  private readonly replayHeaderName: string;
  private readonly attemptTimeoutMs: number;
  private readonly fetch: FetchFunction;
  private readonly onRetry: IdempotentClientOptions['onRetry'];

  /** @throws TypeError for an option out of its range. */
  constructor(options: IdempotentClientOptions = {}) {
    this.retry = resolveRetryOptions(options);
    this.headerName = options.headerName ?? IDEMPOTENCY_KEY_HEADER;
    // The platform says whether the name is a valid header name.
    new Headers().set(this.headerName, 'key');
    this.replayHeaderName =
      options.replayHeaderName ?? IDEMPOTENT_REPLAYED_HEADER;
    new Headers().set(this.replayHeaderName, 'true');
    this.attemptTimeoutMs =
      options.attemptTimeoutMs ?? DEFAULT_ATTEMPT_TIMEOUT_MS;
    checkMilliseconds('attemptTimeoutMs', this.attemptTimeoutMs, 1);
    // Looked up at each call: the global may be replaced after construction.
    this.fetch =
      options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.onRetry = options.onRetry;
  }

  /**
   * Sends one logical operation to `url` until a response ends it.
   *
   * @returns the response that ended it (a success, a replay, or a status
   * not to retry such as 400 or 422), with its key, whether it is a replay,
   * and the attempts made.
   * @throws RetriesExhaustedError when the attempts or the deadline ran out
   * on answers that said "try again".
   * @throws the reason of `init.signal` when it aborts.
   * @throws TypeError for a body that cannot be sent again, a key that
   * differs from the key header given in `init.headers`, or a request that
   * fetch refuses to build (a URL with credentials or that does not parse,
   * a GET or HEAD with a body, an invalid header) or a URL whose scheme is
   * not `http:` or `https:` (`ftp:`, `file:`, `data:`), before anything is
   * sent; with the TypeError of fetch, at its first attempt, for a request
   * that Node.js's fetch builds but will not send (an `Expect`,
   * `Transfer-Encoding`, `Upgrade` or `Keep-Alive` header, a
   * `Content-Length` that is not the body's). Such a request is never
   * retried.
   */
  async send(
    url: string | URL,
    init: IdempotentRequestInit = {},
  ): Promise<IdempotentResult> {
    const { key: givenKey, method = 'POST', signal, ...rest } = init;
    checkReplayable(init.body);
    const headers = new Headers(init.headers);
    const key = keyOf(givenKey, headers.get(this.headerName));
    headers.set(this.headerName, key);
    signal?.throwIfAborted();
    const request: RequestInit = {
      ...rest,
      method,
      headers,
      body: init.body as RequestInit['body'],
    };
    // fetch would refuse it at every attempt, the same way: before any.
    // Its URL, resolved as fetch resolves it (against the page's in a
    // browser), must be an HTTP one.
    if (!isHttpUrl(new URL(new Request(url, request).url))) {
      // The message names neither the URL nor its scheme, which may hold
      // secrets (`alice:s3cr3t@host` parses as the scheme `alice:`).
      throw new TypeError(
        'The URL must be an http: or https: one, not one of another scheme.',
      );
    }
    const deadlineAt = performance.now() + this.retry.deadlineMs;
    for (let attempt = 1; ; attempt += 1) {
      const outcome = await this.attempt(url, request, signal, deadlineAt);
      const { response } = outcome;
      if (response && !isRetryableStatus(response.status, outcome.replayed)) {
        return { response, key, replayed: outcome.replayed, attempts: attempt };
      }
      const delayMs = retryDelay(
        attempt,
        this.retry,
        parseRetryAfter(response?.headers.get('retry-after')),
      );
      const reason =
        !response && outcome.deadline
          ? 'deadline'
          : attempt >= this.retry.attempts
            ? 'attempts'
            : performance.now() + delayMs >= deadlineAt
              ? 'deadline'
              : undefined;
      if (reason) {
        throw new RetriesExhaustedError({
          key,
          attempts: attempt,
          reason,
          response,
          cause: response ? undefined : outcome.error,
        });
      }
      this.onRetry?.({
        key,
        attempt,
        status: response?.status,
        error: response ? undefined : outcome.error,
        delayMs,
      });
      // Frees the connection; the body of an answer to retry is not needed.
      await response?.body?.cancel().catch(() => undefined);
      await wait(delayMs, signal);
    }
  }

  /**
   * One attempt, abandoned when it gets no response within the attempt's
   * time or before the deadline. Only the wait for the status and headers
   * is timed: the caller reads the body in its own time.
   */
  private async attempt(
    url: string | URL,
    request: RequestInit,
    callerSignal: AbortSignal | null | undefined,
    deadlineAt: number,
  ): Promise<Attempt> {
    const left = Math.max(0, deadlineAt - performance.now());
    const deadline = left <= this.attemptTimeoutMs;
    const timeout = new DOMException(
      deadline
        ? `The deadline of ${this.retry.deadlineMs} ms ran out before a response`
        : `No response within ${this.attemptTimeoutMs} ms`,
      'TimeoutError',
    );
    const timer = new AbortController();
    const handle = setTimeout(
      () => timer.abort(timeout),
      Math.min(left, this.attemptTimeoutMs),
    );
    // The caller's signal stays linked to the response: it stops its body.
    const signal = callerSignal
      ? AbortSignal.any([callerSignal, timer.signal])
      : timer.signal;
    try {
      const response = await this.fetch(url, { ...request, signal });
      return {
        response,
        replayed: isReplayed(response.headers, this.replayHeaderName),
        deadline: false,
      };
    } catch (error) {
      if (callerSignal?.aborted) {
        throw callerSignal.reason;
      }
      if (timer.signal.aborted) {
        return { error: timeout, replayed: false, deadline };
      }
      if (isNetworkError(error)) {
        return { error, replayed: false, deadline: false };
      }
      throw error;
    } finally {
      clearTimeout(handle);
    }
  }
}

/**
 * The operation's key: `given`, else the header's, else a new one; as the
 * header carries it, without the whitespace around it that HTTP drops.
 */
function keyOf(value: string | undefined, header: string | null): string {
  const given =
    typeof value === 'string'
      ? value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '')
      : value;
  if (given !== undefined && header !== null && header !== given) {
    throw new TypeError(
      'The idempotency key is given twice, as `key` and in `headers`, with two values: give it once.',
    );
  }
  const key = given ?? header ?? newKey();
  if (typeof key !== 'string' || key === '') {
    throw new TypeError('The idempotency key must be a non-empty string.');
  }
  return key;
}

/** A new key, from the platform's generator of random UUIDs. */
function newKey(): string {
  if (typeof globalThis.crypto?.randomUUID !== 'function') {
    throw new TypeError(
      'crypto.randomUUID() is not available here (a page not served over HTTPS?): give the operation its `key`.',
    );
  }
  return globalThis.crypto.randomUUID();
}

/**
 * Throws unless fetch would send `body` the same way at every attempt (a
 * `ReplayableBody`): for callers without the types.
 */
function checkReplayable(body: unknown): void {
  if (isReplayableBody(body)) {
    return;
  }
  throw new TypeError(
    'The body must be one that can be sent again as it is: a string, bytes, a Blob or URLSearchParams. ' +
      'A stream is read once, and a FormData gets a new multipart boundary at each send: serialize it first.',
  );
}

/** Resolves after `ms`, or rejects with the reason of `signal` when it aborts. */
function wait(
  ms: number,
  signal: AbortSignal | null | undefined,
): Promise<void> {
  signal?.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(handle);
      reject(signal!.reason);
    };
    const handle = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
