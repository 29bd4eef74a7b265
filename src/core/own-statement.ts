/** Errors raised by the module's own statements inside a handler's run. */
const ownErrors = new WeakSet<object>();

/**
 * @internal Runs a statement of the module's own on the handler's behalf
 * (beginning its transaction, reading or saving a step), marking what it
 * throws: raised through the handler, such an error is the database's,
 * never the handler's, and nothing of the attempt commits (503).
 */
export async function ownStatement<T>(statement: () => Promise<T>): Promise<T> {
  try {
    return await statement();
  } catch (error) {
    throw ownStatementError(error);
  }
}

/**
 * @internal Marks `error` as thrown by one of the module's own statements
 * (see {@link ownStatement}), for code that catches it itself.
 * @returns `error`.
 */
export function ownStatementError(error: unknown): unknown {
  if (typeof error === 'object' && error !== null) {
    ownErrors.add(error);
  }
  return error;
}

/** @internal Whether `error` was thrown by one of the module's own statements. */
export function isOwnStatementError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && ownErrors.has(error);
}
