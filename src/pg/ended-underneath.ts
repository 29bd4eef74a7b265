import { Logger } from '@nestjs/common';
import { TransactionEndedError } from '../core/transaction.errors.js';

const logger = new Logger('Idempotency');

/**
 * @internal Watches a handler's transaction on a node-postgres client for
 * its end underneath the module (a `COMMIT` or `ROLLBACK` sent by hand, a
 * library's own transaction run on its connection): the server said, with
 * its last answer, that the session is in no transaction block
 * (`getTransactionStatus()`, 'I'). Once seen, for good; the module's own
 * COMMIT (`committing`) is not such an end.
 */
export class EndedUnderneath {
  /** Set while the module's own COMMIT runs. */
  committing = false;
  private seen: TransactionEndedError | undefined;

  /** The error of the end, once seen. */
  get error(): TransactionEndedError | undefined {
    return this.seen;
  }

  /** Whether the transaction on `client` has been ended underneath. */
  on(client: { getTransactionStatus?(): string | null }): boolean {
    if (
      !this.seen &&
      !this.committing &&
      client.getTransactionStatus?.() === 'I'
    ) {
      this.seen = new TransactionEndedError();
      logger.warn(this.seen.message);
    }
    return this.seen !== undefined;
  }
}
