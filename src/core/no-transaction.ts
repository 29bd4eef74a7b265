import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  HandlerTransaction,
  HandlerTransactions,
  TransactionListener,
} from '../interfaces/handler-transaction.interface.js';
import { TransactionHooks } from './transaction-hooks.js';

/**
 * @internal The error of what needs the handler's database transaction
 * (`IdempotencyContext.manager`, `newTransaction()`, the `manager` of
 * `IdempotencyService.run()`) with a store outside of the application's
 * database.
 */
export function noTransactionError(
  what: string,
): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `${what} needs the PostgreSQL store: the idempotency store of this application completes outside of any database transaction.`,
    'Write through your own data access: the handler runs as is, without a transaction of the module.',
    'Omit `store` in IdempotencyModule.forRoot() to use the PostgreSQL store on the TypeORM DataSource, whose record commits with the handler’s writes.',
  );
}

/**
 * @internal What a handler runs "in" with a store that completes outside of
 * the application's database (Redis, DynamoDB, memory): no transaction at
 * all, only the hooks (`afterCommit()`) that run once the store completed
 * the record, or not at all when the attempt failed.
 */
export class NoTransaction implements HandlerTransaction {
  readonly state = 'none';
  private readonly hooks = new TransactionHooks();

  /** @throws IdempotencyConfigurationError: there is no database transaction. */
  get manager(): never {
    throw noTransactionError('IdempotencyContext.manager');
  }

  onEnd(listener: TransactionListener): void {
    this.hooks.add(listener);
  }

  /** Runs the hooks of a commit: the store has completed the record. */
  commit(): Promise<void> {
    this.hooks.end({ committed: true });
    return Promise.resolve();
  }

  /** Runs the hooks of a rollback. */
  rollback(error?: unknown): Promise<boolean> {
    this.hooks.end({ committed: false, error });
    return Promise.resolve(true);
  }

  abandon(): Promise<void> {
    return this.rollback().then(() => undefined);
  }
}

/** @internal The port without a database: every handler runs in none. */
export const NO_HANDLER_TRANSACTIONS: HandlerTransactions = {
  begin: () => new NoTransaction(),
  join: (_transaction, fn) => fn(),
  newTransaction: () => {
    throw noTransactionError('IdempotencyContext.newTransaction()');
  },
};
