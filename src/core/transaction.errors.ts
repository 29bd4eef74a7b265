/**
 * @internal Raised when a write of the module must go in the handler's
 * transaction (the completion), and that transaction began but is no longer
 * open: its connection broke, or it ended. Nothing of the attempt commits.
 */
export class TransactionLostError extends Error {
  constructor() {
    super(
      "The handler's transaction is no longer open (its connection broke, or it ended): the record is not written anywhere else, and nothing of this attempt commits",
    );
    this.name = 'TransactionLostError';
  }
}

/**
 * @internal Raised when the handler's transaction was ended underneath the
 * module: a `COMMIT` or `ROLLBACK` sent by hand (chained to another
 * transaction or not), or a data library's own
 * transaction run on the handler's connection. What the handler wrote
 * before may have committed without the record; nothing more of the
 * attempt commits, and the record is not written.
 */
export class TransactionEndedError extends TransactionLostError {
  constructor() {
    super();
    this.message =
      "The handler's transaction was ended underneath the module (a COMMIT or ROLLBACK sent by hand, with AND CHAIN or not, or a data library's own transaction() run on the handler's connection): the record is not written, and nothing the handler wrote after that end commits. Write through the handler's transaction, and open transactions of its own with IdempotencyContext.newTransaction()";
    this.name = 'TransactionEndedError';
  }
}

/**
 * @internal Raised by a statement sent in a handler's context once the
 * module has committed or rolled back its transaction: work the handler
 * started and did not await. Refused on every data library, so that
 * nothing of an attempt commits apart from its record (a failed attempt's
 * late write would otherwise commit on its own, and again with each retry).
 */
export class TransactionClosedError extends TransactionLostError {
  constructor() {
    super();
    this.message =
      "The @Idempotent() handler's transaction has already committed or rolled back: a statement sent after that, by work the handler did not await, is refused, so that nothing of an attempt commits apart from its record. Await the work before the handler returns, or run it after the commit with IdempotencyContext.afterCommit()";
    this.name = 'TransactionClosedError';
  }
}

/**
 * @internal Raised at the module's commit when the handler returned with a
 * transaction of its own still open inside its transaction (a savepoint: a
 * nested transaction it did not await, or a `SAVEPOINT` sent by hand and
 * never released): nothing of the attempt commits, neither the nested
 * transaction's work so far nor the rest.
 */
export class TransactionUnfinishedError extends TransactionLostError {
  constructor(savepoint: string) {
    super();
    this.message = `The @Idempotent() handler returned while a transaction it opened inside its own (savepoint "${savepoint}": a nested transaction it did not await, or a SAVEPOINT never released) was still open: nothing of the attempt commits. Await nested transactions before the handler returns, and release or roll back the savepoints it sends`;
    this.name = 'TransactionUnfinishedError';
  }
}

/**
 * @internal Raised at the module's commit when the server answered the
 * `COMMIT` with a `ROLLBACK`: a statement of the handler had failed and the
 * handler caught the error and went on (the case of SQLSTATE 25P02, met at
 * the commit of a request with no record to complete). Nothing committed.
 */
export class TransactionRolledBackError extends TransactionLostError {
  /** SQLSTATE 25P02, in_failed_sql_transaction: what the server meant. */
  readonly code = '25P02';

  constructor() {
    super();
    this.message =
      "The server answered the COMMIT of the handler's transaction with a ROLLBACK: a statement of the handler had failed, and nothing of the attempt committed";
    this.name = 'TransactionRolledBackError';
  }
}

/**
 * Raised at the completion when the handler returned while its
 * transaction was aborted: a statement of its own failed, and it caught the
 * error and went on (PostgreSQL then refuses every statement but a
 * rollback, SQLSTATE 25P02). Nothing of the attempt commits. It is the
 * handler's error, answered as one (500; a message's failed attempt): a
 * retry that does the same meets it again.
 */
export class TransactionAbortedError extends Error {
  constructor() {
    super(
      'The @Idempotent() handler returned while its transaction was aborted: a statement it sent failed, and the handler caught the error and went on. Nothing of the attempt commits. Let the error propagate, or send the statement that may fail in a savepoint (a nested transaction) and roll back to it',
    );
    this.name = 'TransactionAbortedError';
  }
}

/**
 * @internal Raised by a statement of a handler that the module abandoned (its
 * deadline passed): nothing it does commits any more.
 */
export class AbandonedTransactionError extends Error {
  constructor() {
    super(
      'The idempotent request was abandoned at its deadline (transactionTimeout): its transaction is closed',
    );
    this.name = 'AbandonedTransactionError';
  }
}

/**
 * @internal Raised when a handler's transaction could not begin: no
 * connection of the module's share of the pool came free in time.
 */
export class TransactionSlotTimeoutError extends Error {
  constructor(waitMs: number, capacity: number) {
    super(
      `No transaction of the module ended within ${Math.max(0, Math.round(waitMs))} ms (${capacity} open)`,
    );
    this.name = 'TransactionSlotTimeoutError';
  }
}
