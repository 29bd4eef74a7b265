import { isOwnStatementError, ownStatement } from '../core/own-statement.js';

/**
 * What a Prisma error keeps of the database's: `PrismaClientKnownRequestError`
 * has the driver adapter's error as `meta.driverAdapterError`, whose
 * `cause` holds the SQLSTATE (`originalCode`) and the server's message.
 */
interface PrismaDatabaseError {
  readonly meta?: {
    readonly driverAdapterError?: {
      readonly cause?: {
        readonly originalCode?: unknown;
        readonly originalMessage?: unknown;
      };
    };
  };
}

/**
 * @internal `error`, thrown through the handler, as the module reads
 * failures: a Prisma error of the database's stays Prisma's, for the
 * handler's code to catch, with the database's SQLSTATE and message as
 * `driverError` (where the module reads a wrapped error's SQLSTATE, as on
 * TypeORM's `QueryFailedError`), so that a serialization failure or a
 * deadlock answers 503 as on any library.
 */
export function withDriverError(error: unknown): unknown {
  const cause = (error as PrismaDatabaseError | null)?.meta?.driverAdapterError
    ?.cause;
  if (
    typeof error === 'object' &&
    error !== null &&
    typeof cause?.originalCode === 'string' &&
    !('driverError' in error)
  ) {
    Object.defineProperty(error, 'driverError', {
      value: { code: cause.originalCode, message: cause.originalMessage },
      configurable: true,
    });
  }
  return error;
}

/**
 * @internal Fails a statement of the handler with `error`, in a form that
 * Prisma passes through as it is when it is the module's own (the
 * transaction could not begin: see `ownStatement`). Prisma wraps a
 * driver's error (one with a code: a SQLSTATE, a socket's) in an error of
 * its own, which the module would read as the handler's failure; any
 * other error it throws as it is.
 */
export function throughPrisma(error: unknown): Promise<never> {
  if (
    !isOwnStatementError(error) ||
    typeof (error as { code?: unknown }).code !== 'string'
  ) {
    return Promise.reject(error);
  }
  const message = (error as Error | null)?.message ?? String(error);
  return ownStatement(() =>
    Promise.reject(
      new Error(`The handler's transaction could not begin: ${message}`, {
        cause: error,
      }),
    ),
  );
}
