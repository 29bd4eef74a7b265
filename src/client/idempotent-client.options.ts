import type { RetryOptions } from './retry-policy.js';

/**
 * The `fetch` the client sends with: the platform's, or any function that
 * takes a URL and a `RequestInit` as it does and honours `init.signal`.
 */
export type FetchFunction = (
  input: string | URL,
  init: RequestInit,
) => Promise<Response>;

/**
 * A body that can be sent again byte for byte: a string, bytes, a `Blob`
 * or `URLSearchParams`. Not a stream (read once) nor a `FormData` (its
 * multipart boundary changes at each send).
 */
export type ReplayableBody =
  string | URLSearchParams | Blob | ArrayBuffer | ArrayBufferView;

/** Options of an `IdempotentClient` (all optional), retries included. */
export interface IdempotentClientOptions extends RetryOptions {
  /** Request header that carries the key. @default 'Idempotency-Key' */
  readonly headerName?: string;
  /**
   * Response header whose value `true` (in any case) marks a replay, the
   * stored final outcome of the key, which is never retried: the name the
   * server gives it (the module's `replayHeaderName`). Matched in any case.
   * @default 'Idempotent-Replayed'
   */
  readonly replayHeaderName?: string;
  /**
   * Time one attempt may wait for its response's status and headers, in
   * ms; then it is abandoned and retried under the same key, as when the
   * connection drops. The deadline bounds it too. @default 10000
   */
  readonly attemptTimeoutMs?: number;
  /** The `fetch` to send with. @default globalThis.fetch */
  readonly fetch?: FetchFunction;
  /**
   * Called before each wait for a retry (for logs or metrics). What it
   * throws stops the operation and is thrown by `send()`.
   */
  readonly onRetry?: (event: RetryEvent) => void;
}

/** One attempt that will be retried, as `onRetry` is told of it. */
export interface RetryEvent {
  /** The idempotency key, the same for every attempt. */
  readonly key: string;
  /** The attempt that failed (1 for the first). */
  readonly attempt: number;
  /** Its response's status; undefined when it got no response. */
  readonly status: number | undefined;
  /** Why it got no response (a network error, a timeout); undefined when it got one. */
  readonly error: unknown;
  /** The wait before the next attempt, in ms. */
  readonly delayMs: number;
}

/** One logical operation: a `RequestInit` whose body can be sent again, and its key. */
export interface IdempotentRequestInit extends Omit<
  RequestInit,
  'body' | 'method' | 'signal'
> {
  /** HTTP method. @default 'POST' */
  readonly method?: string;
  /** The body, sent as it is by every attempt. */
  readonly body?: ReplayableBody | null;
  /**
   * The operation's idempotency key, to resume an operation begun earlier
   * (a key kept from a failed `send()`), without the whitespace around it,
   * which its header drops (HTTP does). @default a new
   * `crypto.randomUUID()`, or the key header given in `headers`
   */
  readonly key?: string;
  /** Stops the operation at once, its attempt and its waits, and its response's body. */
  readonly signal?: AbortSignal | null;
}

/** What `send()` resolves to: the response that ended the operation. */
export interface IdempotentResult {
  /** The final response, its body unread: a success, a replay, or a status not to retry. */
  readonly response: Response;
  /** The idempotency key that every attempt carried. */
  readonly key: string;
  /** Whether the response is a replay (`Idempotent-Replayed: true`, under the `replayHeaderName` option): the outcome stored by an earlier attempt or an earlier `send()`. */
  readonly replayed: boolean;
  /** Attempts made (1 when the first one ended it). */
  readonly attempts: number;
}
