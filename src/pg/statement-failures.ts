import { isAbortedTransaction } from '../core/failures.js';
import { isThenable } from '../core/is-thenable.js';

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
    if (!isThenable(sent)) {
      return sent;
    }
    return sent.then(undefined, (error: unknown) => {
      if (!isAbortedTransaction(error)) {
        this.last = error;
      }
      throw error;
    }) as T;
  }
}
