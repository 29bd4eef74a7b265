import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { isAbortedTransaction } from '../core/failures.js';
import { TransactionEndedError } from '../core/transaction.errors.js';
import { TRANSACTION_MARK_SETTING } from '../idempotency.constants.js';
import { beginStatement } from './pg-pool-connection.js';

const logger = new Logger('Idempotency');

/**
 * @internal Watches a handler's transaction on a node-postgres client for
 * its end underneath the module (a `COMMIT` or `ROLLBACK` sent by hand, a
 * library's own transaction run on its connection): the server said, with
 * its last answer, that the session is in no transaction block
 * (`getTransactionStatus()`, 'I'). Once seen, for good; the module's own
 * COMMIT (`committing`) is not such an end.
 *
 * An end that begins another transaction at once (`COMMIT AND CHAIN`,
 * `ROLLBACK AND CHAIN`, `COMMIT; BEGIN` in one query) leaves the session in
 * a transaction block: the transaction's {@link mark}, set with its BEGIN
 * for that transaction alone, is then what tells, to the completion (see
 * the PostgreSQL store's completion).
 */
export class EndedUnderneath {
  /** Set while the module's own COMMIT runs. */
  committing = false;
  private seen: TransactionEndedError | undefined;
  private marked: string | undefined;

  /** The error of the end, once seen. */
  get error(): TransactionEndedError | undefined {
    return this.seen;
  }

  /** The transaction's mark, once {@link begin} made it. */
  get mark(): string | undefined {
    return this.marked;
  }

  /**
   * The statements that begin the transaction at `isolationLevel` and mark
   * it as the module's, for it alone (`SET LOCAL`, undone at its end: a
   * transaction chained after it has no mark), in one simple query.
   */
  begin(isolationLevel: string | undefined): string {
    this.marked = randomUUID();
    return `${beginStatement(isolationLevel)}; SET LOCAL ${TRANSACTION_MARK_SETTING} = '${this.marked}'`;
  }

  /**
   * Whether the transaction on `client` has been ended underneath, asking
   * the server for the transaction's mark when the session is still in a
   * transaction block (an end chained to another transaction shows only
   * there). A transaction aborted by a failed statement cannot be asked
   * (SQLSTATE 25P02): it is taken as not ended, unless `sent` (a statement
   * that ends the transaction was seen sent: see `OpenSavepoints.endSent`).
   * @throws what the query met otherwise (its connection broke).
   */
  async check(
    client: {
      getTransactionStatus?(): string | null;
      query(text: string): Promise<{ rows: Array<{ mark?: unknown }> }>;
    },
    sent: boolean,
  ): Promise<boolean> {
    if (sent || this.on(client) || this.marked === undefined) {
      return sent || this.seen !== undefined;
    }
    try {
      const { rows } = await client.query(
        `SELECT current_setting('${TRANSACTION_MARK_SETTING}', true) AS mark`,
      );
      if (!this.seen && rows[0]?.mark !== this.marked) {
        this.seen = new TransactionEndedError();
        logger.warn(this.seen.message);
      }
    } catch (error) {
      if (!isAbortedTransaction(error)) {
        throw error;
      }
    }
    return this.seen !== undefined;
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
