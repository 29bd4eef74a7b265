import { sqlState } from '../core/failures.js';

/** SQLSTATE of a statement refused in a transaction already aborted. */
const IN_FAILED_SQL_TRANSACTION = '25P02';

/**
 * @internal The last failure of a statement the handler sent in its
 * transaction: what aborted it, when the handler caught the error and went
 * on (every later statement then fails with SQLSTATE 25P02, the module's
 * completion too, which tells nothing of the cause). A failure the handler
 * rolled back to a savepoint is followed by none, or by a later one.
 */
export class StatementFailures {
  /** The last failure but a 25P02: the cause of an aborted transaction. */
  last: unknown;

  /**
   * `sent` (a statement's answer, as the driver returns it), its failure
   * noted; anything but a promise passes as it is.
   */
  watch<T>(sent: T): T {
    if (
      typeof (sent as PromiseLike<unknown> | undefined)?.then !== 'function'
    ) {
      return sent;
    }
    return (sent as Promise<unknown>).then(undefined, (error: unknown) => {
      if (sqlState(error) !== IN_FAILED_SQL_TRANSACTION) {
        this.last = error;
      }
      throw error;
    }) as T;
  }
}
