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
