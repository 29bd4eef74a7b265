import { isOwnStatementError } from '../core/own-statement.js';
import {
  AbandonedTransactionError,
  TransactionLostError,
  TransactionSlotTimeoutError,
} from '../core/transaction.errors.js';

/** A Drizzle session, as far as it prepares statements. */
interface PreparingSession {
  prepareQuery(...args: never[]): unknown;
}

/** A prepared query of a Drizzle session: what runs a statement. */
interface PreparedStatement {
  execute(...args: unknown[]): Promise<unknown>;
  all(...args: unknown[]): Promise<unknown>;
}

/**
 * Whether `cause` is the module's own error, raised by the handler's
 * transaction rather than by the database: the transaction could not
 * begin, was lost, ended underneath, or abandoned at the deadline.
 */
function isModuleError(cause: unknown): boolean {
  return (
    cause instanceof TransactionLostError ||
    cause instanceof AbandonedTransactionError ||
    cause instanceof TransactionSlotTimeoutError ||
    isOwnStatementError(cause)
  );
}

/**
 * What the module reads of an error that Drizzle wrapped (every failed
 * statement is a `DrizzleQueryError` whose `cause` is what the client
 * threw): an error of the module's own is thrown as it is, so that the
 * request answers as it would on any library (503, or the deadline's
 * answer); a database error stays Drizzle's, for the handler's code to
 * catch, with the driver's error as `driverError`, where the module reads
 * the SQLSTATE of a wrapped error (as on TypeORM's `QueryFailedError`), so
 * that a serialization failure, a deadlock or a lost connection answers
 * 503.
 */
function translated(error: unknown): never {
  const cause = (error as { cause?: unknown } | null)?.cause;
  if (cause === undefined || typeof error !== 'object' || error === null) {
    throw error;
  }
  if (isModuleError(cause)) {
    throw cause;
  }
  if (!('driverError' in error)) {
    Object.defineProperty(error, 'driverError', {
      value: cause,
      configurable: true,
    });
  }
  throw error;
}

/**
 * @internal Makes the statements of `session` (a Drizzle session on the
 * handler's transaction) fail as the module reads failures: see
 * {@link translated}. Every statement of a Drizzle database, its query
 * builders, relational queries, `execute()` and savepoints, runs through
 * the session's `prepareQuery()` and the prepared query's `execute()` or
 * `all()`.
 */
export function translateQueryErrors(session: PreparingSession): void {
  const prepare = session.prepareQuery.bind(session);
  session.prepareQuery = (...args) => {
    const prepared = prepare(...args);
    const statement = prepared as PreparedStatement;
    const execute = statement.execute.bind(prepared);
    const all = statement.all.bind(prepared);
    statement.execute = (...values) => execute(...values).catch(translated);
    statement.all = (...values) => all(...values).catch(translated);
    return prepared;
  };
}
