/** How a handler's transaction ended. */
export type TransactionOutcome =
  | { readonly committed: true }
  | { readonly committed: false; readonly error: unknown };

/** Told how a handler's transaction ended. */
export type TransactionListener = (
  outcome: TransactionOutcome,
) => unknown | Promise<unknown>;

/**
 * What became of a handler's transaction:
 * - `none`: there is none (a store that completes outside of the
 *   application's database);
 * - `idle`: no statement has begun it yet;
 * - `open`: a statement began it (or is beginning it), and it holds its
 *   connection;
 * - `lost`: it began, and its connection broke: its writes are gone;
 * - `ended`: committed, rolled back or abandoned.
 */
export type HandlerTransactionState =
  'none' | 'idle' | 'open' | 'lost' | 'ended';

/**
 * The transaction a handler runs in, as the request sequence drives it. The store completes in it (`IdempotencyStore.complete`) when
 * it completes in the handler's transaction.
 */
export interface HandlerTransaction {
  readonly state: HandlerTransactionState;
  /**
   * The handle of the data access library that the handler's code writes
   * through (TypeORM's `EntityManager`).
   * @throws IdempotencyConfigurationError when there is no transaction.
   */
  readonly manager: unknown;
  /**
   * The error of the last statement of the handler's that failed in the
   * transaction (other than one refused because the transaction was
   * already aborted, SQLSTATE 25P02): what aborted it, where the handler
   * caught the error and went on. @default undefined: none, or not known
   */
  readonly abortedBy?: unknown;
  /** Adds what runs once the transaction has ended (see TransactionHooks). */
  onEnd(listener: TransactionListener): void;
  /**
   * Called once the handler returned, before the completion: a statement
   * still beginning the transaction is awaited (the completion then goes in
   * it), and a transaction no statement began is closed to every later one
   * (work the handler did not await fails with `TransactionClosedError`),
   * so that nothing begins it after the completion went without it.
   * Never throws. @default none: nothing to seal
   */
  seal?(): Promise<void>;
  /**
   * Whether the transaction was ended underneath the module (a `COMMIT` or
   * `ROLLBACK` sent by hand, chained to another transaction or not), asking
   * the server when only it can tell: for a failed attempt whose error
   * answer may be stored, which must then not be (what the handler wrote
   * before that end may have committed). Rejects when the server cannot be
   * asked (its connection broke). @default none: never ended underneath
   */
  endedUnderneath?(): Promise<boolean>;
  /**
   * Commits what the handler wrote, and runs the hooks of a commit.
   * @throws when it cannot commit: nothing of the attempt committed (or,
   * for a failed COMMIT, its outcome is unknown).
   */
  commit(): Promise<void>;
  /**
   * Rolls back, and runs the hooks of a rollback with `error`. Never throws.
   * @returns false when the rollback failed: the transaction was lost.
   */
  rollback(error?: unknown): Promise<boolean>;
  /**
   * At the deadline: stops what the handler runs in it, rolls back, and
   * makes its later statements fail.
   */
  abandon(): Promise<void>;
}

/**
 * The port through which the request sequence gets the handler's
 * transaction: the store's (`IdempotencyStore.transactions`), which the
 * PostgreSQL store takes from its data library's adapter; none with the
 * other stores. A data library's adapter implements these three functions;
 * `Manager` is its handle of a transaction (TypeORM's `EntityManager`).
 *
 * The interface doubles as its injection token.
 */
export interface HandlerTransactions<Manager = unknown> {
  /**
   * A transaction for a handler whose time is up at `deadline` (epoch ms),
   * at `isolationLevel` (by default, the data source's).
   */
  begin(deadline: number, isolationLevel?: string): HandlerTransaction;
  /**
   * Runs the handler, `fn`, with the transaction libraries in use seeing
   * `transaction` as their current one.
   */
  join<T>(transaction: HandlerTransaction, fn: () => Promise<T>): Promise<T>;
  /**
   * Runs `fn` in a transaction of its own, outside of the handler's (see
   * `IdempotencyContext.newTransaction`).
   */
  newTransaction<T>(
    isolationLevel: string | undefined,
    fn: (manager: Manager) => Promise<T>,
  ): Promise<T>;
}

/** @internal Injection token of the {@link HandlerTransactions}. */
export const HandlerTransactions = Symbol('HandlerTransactions');
