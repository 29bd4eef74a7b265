import type { OnModuleInit } from '@nestjs/common';
import type { Pool } from 'pg';
import { handlerContexts } from '../core/handler-context.js';
import {
  joinParticipants,
  transactionParticipants,
} from '../core/transaction-participants.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import type {
  PostgresAdapterOptions,
  PostgresConnection,
  PostgresDataAccess,
} from '../interfaces/postgres-adapter.interface.js';
import { poolConnection } from './pg-pool-connection.js';
import { PoolTransaction, type LazyPoolClient } from './pool-transaction.js';
import { poolTransactionGate, TransactionGate } from './transaction-gate.js';

/**
 * @internal A data library on a node-postgres pool, as its adapter finds it
 * in the application: the pool, and the library's handles of a
 * transaction.
 */
export interface PoolLibrary<Handle> {
  /** The application's pool, which the library writes through. */
  readonly pool: Pool;
  /**
   * The application's client of the library (its Drizzle or Kysely
   * database, the pool itself): the transaction libraries that join the
   * handlers' transactions are added for it (see addTransactionParticipant).
   */
  readonly client: object;
  /** The library's handle of a handler's transaction, on `client`. */
  handleOf(client: LazyPoolClient): Handle;
  /**
   * Runs `fn` in a transaction of its own on another connection of the
   * pool, at `isolationLevel` (by default, the server's), with the
   * library's handle of it.
   */
  newTransaction<T>(
    isolationLevel: IdempotencyIsolationLevel | undefined,
    fn: (handle: Handle) => Promise<T>,
  ): Promise<T>;
}

/**
 * @internal The PostgreSQL store's data access on a library that writes
 * through a node-postgres pool (pg itself, Drizzle, Kysely): the handlers'
 * transactions are {@link PoolTransaction}s, begun by their first
 * statement, at most one fewer open at once than the pool's connections.
 */
export class PoolDataAccess<Handle>
  implements PostgresDataAccess<Handle>, OnModuleInit
{
  private library: PoolLibrary<Handle> | undefined;
  private poolConnection: PostgresConnection | undefined;
  private gate = new TransactionGate(Infinity);

  constructor(
    /** Finds the library in the application; called once, at start-up. */
    private readonly find: () => PoolLibrary<Handle>,
    readonly schemaHelp: { readonly where: string; readonly how: string },
    /** The adapter's `presence` and `isolationLevel`. */
    private readonly options: PostgresAdapterOptions = {},
  ) {}

  get presence(): PostgresAdapterOptions['presence'] {
    return this.options.presence;
  }

  onModuleInit(): void {
    this.resolve();
  }

  get connection(): PostgresConnection {
    this.resolve();
    return this.poolConnection!;
  }

  begin(deadline: number, isolationLevel?: string): PoolTransaction<Handle> {
    const library = this.resolve();
    return new PoolTransaction(
      library.pool,
      this.gate,
      deadline,
      (isolationLevel as IdempotencyIsolationLevel | undefined) ??
        this.options.isolationLevel,
      (client) => library.handleOf(client),
    );
  }

  /**
   * Runs the handler, `fn`, with the transaction libraries that joined the
   * library's client seeing `transaction` as their current one.
   */
  join<T>(transaction: HandlerTransaction, fn: () => Promise<T>): Promise<T> {
    const joining = transactionParticipants<PoolTransaction<Handle>>(
      this.resolve().client,
    );
    return joining.length === 0
      ? fn()
      : joinParticipants(joining, transaction as PoolTransaction<Handle>, fn);
  }

  newTransaction<T>(
    isolationLevel: string | undefined,
    fn: (handle: Handle) => Promise<T>,
  ): Promise<T> {
    const library = this.resolve();
    return handlerContexts.exit(() =>
      library.newTransaction(
        (isolationLevel as IdempotencyIsolationLevel | undefined) ??
          this.options.isolationLevel,
        fn,
      ),
    );
  }

  private resolve(): PoolLibrary<Handle> {
    if (this.library) {
      return this.library;
    }
    const library = this.find();
    const { pool } = library;
    if (
      typeof pool?.connect !== 'function' ||
      typeof pool.query !== 'function'
    ) {
      throw new IdempotencyConfigurationError(
        'The data library of the idempotency module does not write through a node-postgres Pool.',
        'Give it a `pg.Pool` (node-postgres 8): the module runs the handlers’ transactions and its own statements on that pool.',
      );
    }
    this.gate = poolTransactionGate(
      (pool as { options?: { max?: unknown } }).options?.max ?? 10,
    );
    this.poolConnection = poolConnection(pool);
    this.library = library;
    return library;
  }
}
