/** Why an operation of `IdempotentClient` stopped retrying. */
export type RetriesExhaustedReason = 'attempts' | 'deadline';

/** What {@link RetriesExhaustedError} carries. */
export interface RetriesExhaustedDetails {
  /** The idempotency key that every attempt carried. */
  readonly key: string;
  /** Attempts made. */
  readonly attempts: number;
  /** Which bound ran out: the number of attempts, or the deadline. */
  readonly reason: RetriesExhaustedReason;
  /** The last attempt's response, its body unread; undefined when it got none. */
  readonly response?: Response;
  /**
   * Why the last attempt got no response (a network error, a timeout): the
   * error's `cause`; the message names only its name and code.
   */
  readonly cause?: unknown;
}

/**
 * Thrown by `IdempotentClient.send()` when the attempts or the deadline
 * run out while the answers still say "try again" (a network failure, a
 * 409, 429 or 5xx that is not a replay). Whether the operation took effect
 * is unknown: sending it again later under the same `key` is safe, and
 * tells.
 *
 * The message names neither the key nor the URL, which may be secrets, nor
 * the message of the error that ended the last attempt (it may hold them):
 * only that error's name and code. Read them from the error's fields, and
 * that error from `cause`.
 */
export class RetriesExhaustedError extends Error {
  /** The idempotency key that every attempt carried. */
  readonly key: string;
  /** Attempts made. */
  readonly attempts: number;
  /** Which bound ran out: the number of attempts, or the deadline. */
  readonly reason: RetriesExhaustedReason;
  /** The last attempt's status; undefined when it got no response. */
  readonly status: number | undefined;
  /** The last attempt's response, its body unread; undefined when it got none. */
  readonly response: Response | undefined;

  constructor(details: RetriesExhaustedDetails) {
    const last = details.response
      ? `the last attempt got ${details.response.status}`
      : `the last attempt got no response (${describe(details.cause)})`;
    const bound =
      details.reason === 'attempts' ? 'no attempt left' : 'deadline reached';
    super(
      `Gave up after ${details.attempts} attempt${details.attempts === 1 ? '' : 's'} (${bound}): ${last}.`,
      { cause: details.cause },
    );
    this.name = 'RetriesExhaustedError';
    this.key = details.key;
    this.attempts = details.attempts;
    this.reason = details.reason;
    this.status = details.response?.status;
    this.response = details.response;
  }
}

/** A name or code that cannot hold a URL or a header's value. */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/**
 * The error that ended the last attempt, as the message names it: its name
 * and code (its cause's code when it has none), never its message, which
 * may hold the URL, a header or the key.
 * @example describe(new TypeError('fetch failed', { cause: econnrefused })) // 'TypeError, ECONNREFUSED'
 */
function describe(error: unknown): string {
  if (typeof error !== 'object' || error === null) {
    return 'an error';
  }
  const { name, code, cause } = error as {
    name?: unknown;
    code?: unknown;
    cause?: { code?: unknown } | null;
  };
  const parts = [name, typeof code === 'string' ? code : cause?.code].filter(
    (part): part is string => typeof part === 'string' && IDENTIFIER.test(part),
  );
  return parts.length > 0 ? parts.join(', ') : 'an error';
}
