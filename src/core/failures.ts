import { HttpException } from '@nestjs/common';
import { IdempotencyHttpException } from '../exceptions/idempotency-http.exception.js';
import { isOwnStatementError } from './own-statement.js';
import {
  AbandonedTransactionError,
  TransactionLostError,
  TransactionSlotTimeoutError,
} from './transaction.errors.js';

/** SQLSTATE of a statement cancelled: by the module at the deadline, or by an administrator. */
const QUERY_CANCELED = '57014';
/**
 * SQLSTATEs of PostgreSQL ending a statement or a transaction on a timeout:
 * a statement cancelled, a lock not had within `lock_timeout` (55P03), a
 * session idle in its transaction, or a transaction, too long.
 */
const TIMEOUT_CODES = new Set([QUERY_CANCELED, '55P03', '25P03', '25P04']);
/**
 * SQLSTATEs of the server ending a session, or refusing one for now: an
 * administrator's termination, a crash, a shutdown, a start under way.
 */
const SERVER_GONE_CODES = new Set(['57P01', '57P02', '57P03']);
/**
 * SQLSTATEs of PostgreSQL ending a session: terminated by an administrator, a
 * crash or a shutdown (57P01-57P03), or on the idle-in-transaction or
 * transaction timeout (25P03, 25P04).
 */
const SESSION_ENDED_CODES = new Set([...SERVER_GONE_CODES, '25P03', '25P04']);
/**
 * SQLSTATEs of a transaction that PostgreSQL rolled back for the sake of a
 * concurrent one: a serialization failure (REPEATABLE READ, SERIALIZABLE)
 * or a deadlock. Nothing was written; the same request retried may succeed.
 */
const CONCURRENCY_CODES = new Set(['40001', '40P01']);
/**
 * @internal Statuses that ask the client to come back later: 408 Request
 * Timeout, 425 Too Early and 429 Too Many Requests. The error policy never
 * stores them, whatever it says: stored, a refusal for now would answer
 * every retry of the key until it expires.
 */
export const RETRY_LATER_STATUSES: ReadonlySet<number> = new Set([
  408, 425, 429,
]);

/**
 * @internal Whether an error answer asks the client to come back later, and
 * so is never stored, whatever the error policy says: a 408, 425 or 429
 * (see {@link RETRY_LATER_STATUSES}), an answer with a `Retry-After` header,
 * or one of the module's own that carries one (a 409 of a key in progress
 * that a nested `run()` or step met, a 503). Stored, it would answer every
 * retry of the key until it expires, for a request that a retry completes.
 */
export function asksRetryLater(
  status: number,
  headers: Readonly<Record<string, string | string[]>>,
  error?: unknown,
): boolean {
  return (
    RETRY_LATER_STATUSES.has(status) ||
    hasRetryAfter(headers) ||
    (error instanceof IdempotencyHttpException && hasRetryAfter(error.headers))
  );
}

function hasRetryAfter(
  headers: Readonly<Record<string, string | string[]>>,
): boolean {
  return Object.keys(headers).some(
    (name) => name.toLowerCase() === 'retry-after',
  );
}

/**
 * @internal Whether a response the handler answered with (not threw) is a
 * failure of the attempt, rolled back and never stored: a 5xx, or a status
 * that asks the client to come back later (see {@link RETRY_LATER_STATUSES}).
 */
export function failsAttempt(status: number): boolean {
  return status >= 500 || RETRY_LATER_STATUSES.has(status);
}

/** Errors of a socket to the server, as Node.js names them. */
const SOCKET_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * @internal Raised when an attempt's claim was taken over while it ran: what
 * it wrote rolls back. Its message names no key: the `lease-lost` event's
 * line that logs it shows the key as the `keys` setting says.
 */
export class LeaseLostError extends Error {
  constructor() {
    super(
      "The claim of this attempt's key was taken over by another attempt (its lease ran out, or its instance's presence session dropped): nothing of this attempt commits",
    );
    this.name = 'LeaseLostError';
  }
}

/** The driver's error behind a TypeORM error, or the error itself. */
function driverError(error: unknown): { code?: unknown; message?: unknown } {
  const wrapped = (error as { driverError?: unknown } | undefined)?.driverError;
  return (wrapped ?? error ?? {}) as { code?: unknown; message?: unknown };
}

/** @internal SQLSTATE of a database error, if it has one. */
export function sqlState(error: unknown): string | undefined {
  const { code } = driverError(error);
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)
    ? code
    : undefined;
}

/**
 * Whether a query of the handler failed because its connection broke: a
 * socket error, or the driver's "Connection terminated", neither of which
 * carries a SQLSTATE. Only TypeORM's query errors (`driverError`) count: the
 * handler's own HTTP clients may fail with the same codes.
 */
function isConnectionError(error: unknown): boolean {
  return (
    !!(error as { driverError?: unknown })?.driverError && isBrokenSocket(error)
  );
}

/** A socket error, or the driver's "Connection terminated" (no SQLSTATE). */
function isBrokenSocket(error: unknown): boolean {
  const { code, message } = driverError(error);
  return (
    (typeof code === 'string' && SOCKET_ERRORS.has(code)) ||
    (typeof message === 'string' && message.startsWith('Connection terminated'))
  );
}

/**
 * @internal Whether a statement sent through the DataSource failed for want
 * of a connection, not for what it asked: a socket error, the driver's
 * "Connection terminated", a connection exception (SQLSTATE class 08), or
 * the server ending the session or refusing it for now (57P01-57P03). The
 * same statement may succeed on a new connection. TypeORM's error or the
 * driver's own both count: a connection that cannot be opened fails before
 * TypeORM wraps the error.
 */
export function isConnectionFailure(error: unknown): boolean {
  const code = sqlState(error);
  return (
    (code !== undefined &&
      (code.startsWith('08') || SERVER_GONE_CODES.has(code))) ||
    isBrokenSocket(error)
  );
}

/**
 * SQLSTATE of a statement refused because an earlier one of its transaction
 * failed: PostgreSQL takes nothing but a rollback any more.
 */
const IN_FAILED_SQL_TRANSACTION = '25P02';

/**
 * @internal Whether a statement of the module's in the handler's transaction
 * (its completion) failed because that transaction was already aborted: a
 * statement of the handler failed, and the handler caught its error and
 * returned (see `TransactionAbortedError`).
 */
export function isAbortedTransaction(error: unknown): boolean {
  return sqlState(error) === IN_FAILED_SQL_TRANSACTION;
}

/** @internal How the module answers a failed attempt. */
export type FailureKind =
  /** The handler's own error: sent as it is. */
  | 'handler'
  /** The database timed the transaction out, or the deadline passed: 503. */
  | 'timeout'
  /** The transaction or the claim was lost: nothing was written; 503. */
  | 'unavailable';

/**
 * @internal Classifies the error of a handler: whether nothing was written
 * and the client may retry (503), and why.
 * @param transaction what became of the handler's transaction: `lost`, its
 * connection broke while the handler ran; `rolledBack`, its rollback went
 * through (one that failed tells that the connection is gone, whichever
 * connection the handler's error came from).
 */
export function classifyFailure(
  error: unknown,
  transaction: { readonly lost: boolean; readonly rolledBack: boolean },
): FailureKind {
  if (
    error instanceof AbandonedTransactionError ||
    TIMEOUT_CODES.has(sqlState(error) ?? '')
  ) {
    return 'timeout';
  }
  if (
    transaction.lost ||
    // A rollback that failed tells that the connection is gone: whatever the
    // handler answered may rest on writes that never committed.
    !transaction.rolledBack ||
    error instanceof LeaseLostError ||
    error instanceof TransactionLostError ||
    error instanceof TransactionSlotTimeoutError ||
    // The database failed a statement of the module's own (the begin of
    // the transaction, a step's read or save), not the handler.
    isOwnStatementError(error)
  ) {
    return 'unavailable';
  }
  // The handler's own HTTP answers are kept.
  if (error instanceof HttpException) {
    return 'handler';
  }
  const code = sqlState(error);
  return (code !== undefined &&
    (code.startsWith('08') ||
      SESSION_ENDED_CODES.has(code) ||
      CONCURRENCY_CODES.has(code))) ||
    isConnectionError(error)
    ? 'unavailable'
    : 'handler';
}

/**
 * @internal How the module answers an attempt whose handler's transaction
 * `abortedBy` tells of a failure a retry may not meet (a deadlock, a
 * serialization failure, a statement, lock or session timeout, the server
 * ending the session): `'timeout'` or `'unavailable'`, a 503, whatever the
 * handler made of it (a success it returned, an error it threw). Undefined
 * when nothing failed, or when what failed was the handler's own doing
 * (a retry meets it again).
 * @param abortedBy the last statement of the handler's that failed in its
 * transaction (see `HandlerTransaction.abortedBy`).
 */
export function transientAbort(abortedBy: unknown): FailureKind | undefined {
  if (abortedBy === undefined) {
    return undefined;
  }
  const kind = classifyFailure(abortedBy, { lost: false, rolledBack: true });
  return kind === 'handler' ? undefined : kind;
}
