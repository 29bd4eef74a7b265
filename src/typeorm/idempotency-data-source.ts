import {
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { Pool } from 'pg';
import type { DataSource, EntityManager } from 'typeorm';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';
import { isIsolationLevel } from '../idempotency.options.js';
import type {
  PostgresAdapterOptions,
  PostgresConnection,
  PostgresDataAccess,
} from '../interfaces/postgres-adapter.interface.js';
import type { TypeOrmIdempotencyAdapterOptions } from './typeorm-adapter.options.js';
import { joinParticipants } from '../core/transaction-participants.js';
import { poolConnection } from '../pg/pg-pool-connection.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { assertPostgresDataSource } from './postgres-data-source.js';
import { bindAmbientTransaction } from './ambient-transaction.js';
import { LazyTransaction } from './lazy-transaction.js';
import {
  lazyQueryRunners,
  type LazyQueryRunners,
} from './lazy-query-runner.js';
import {
  poolTransactionGate,
  TransactionGate,
} from '../pg/transaction-gate.js';
import {
  outsideHandlerTransaction,
  transactionParticipants,
  type TransactionParticipant,
} from './transaction-participants.js';
import type { TypeormRuntime } from './typeorm-runtime.js';
import {
  joinTypeormTransactional,
  typeormTransactionalName,
} from './typeorm-transactional.js';

/**
 * The options with which `@nestjs/typeorm` retries the DataSource's own
 * connection at start-up (`TypeOrmModule.forRoot({ retryAttempts,
 * retryDelay })`), which it hands over to the DataSource: the store's
 * start-up check retries with them.
 */
interface TypeOrmRetryOptions {
  readonly retryAttempts?: unknown;
  readonly retryDelay?: unknown;
}

/**
 * @internal The module's side of TypeORM, and the TypeORM implementation of
 * the PostgreSQL store's data access: the application's DataSource (the
 * default one, or the one named), whose manager, repositories and
 * `query()` are bound to the ambient transaction of the decorated handler
 * running, the share of its pool that handler transactions may hold, and
 * the transaction libraries that join them.
 */
export class IdempotencyDataSource
  implements
    PostgresDataAccess<EntityManager>,
    OnModuleInit,
    OnApplicationBootstrap,
    OnApplicationShutdown
{
  private source: DataSource | undefined;
  private driverPool: Pool | undefined;
  private poolConnection: PostgresConnection | undefined;
  private unbind?: () => void;
  /** Makes the query runners of handler transactions, once resolved. */
  private runners: LazyQueryRunners | undefined;
  private transactionGate = new TransactionGate(Infinity);
  /** The DataSource's `isolationLevel` option, the default of handlers. */
  private defaultLevel: IdempotencyIsolationLevel | undefined;
  /** typeorm-transactional, once it is seen to manage the DataSource. */
  private typeormTransactional: Promise<TransactionParticipant> | undefined;

  readonly schemaHelp = {
    where: 'the database of the TypeORM DataSource',
    how: 'Add `...idempotencyMigrations` to the DataSource `migrations` and run them (TypeORM CLI `migration:run`, or `migrationsRun: true`).',
  };

  /** The adapter's `presence`, if it sets one. */
  readonly presence: PostgresAdapterOptions['presence'];
  /** The DataSource's name; `undefined`: the default one. */
  private readonly name: string | undefined;
  /** The adapter's default level of handlers, before the DataSource's. */
  private readonly level: IdempotencyIsolationLevel | undefined;

  constructor(
    private readonly moduleRef: ModuleRef,
    options: TypeOrmIdempotencyAdapterOptions,
    private readonly typeorm: TypeormRuntime,
  ) {
    this.name = options.dataSource;
    this.presence = options.presence;
    this.level = options.isolationLevel;
  }

  onModuleInit(): void {
    this.resolve();
  }

  async onApplicationBootstrap(): Promise<void> {
    // Loaded before the first request, so that a setup it refuses stops
    // the application.
    await this.typeormTransactionalParticipant();
  }

  onApplicationShutdown(): void {
    this.unbind?.();
    this.unbind = undefined;
  }

  /** The application's DataSource. */
  get dataSource(): DataSource {
    return this.resolve();
  }

  /** The pool of the DataSource's driver (pg), for the module's statements. */
  get pool(): Pool {
    this.resolve();
    return this.driverPool!;
  }

  /**
   * The store's connection: the pool of the DataSource's driver, retried at
   * start-up as `@nestjs/typeorm` retries the DataSource.
   */
  get connection(): PostgresConnection {
    this.resolve();
    return this.poolConnection!;
  }

  /** The transactions of handlers open now, and how many may be. */
  get gate(): TransactionGate {
    return this.transactionGate;
  }

  /**
   * A transaction for a handler, begun by its first statement at
   * `isolationLevel` (by default, the DataSource's `isolationLevel` option,
   * else the server's default).
   */
  begin(deadline: number, isolationLevel?: string): LazyTransaction {
    return new LazyTransaction(
      this.resolve(),
      this.runners!,
      this.transactionGate,
      deadline,
      (isolationLevel as IdempotencyIsolationLevel | undefined) ??
        this.defaultLevel,
    );
  }

  /**
   * Runs a handler, `fn`, with the transaction libraries in use on the
   * DataSource seeing `transaction` as their current transaction.
   */
  join<T>(handler: HandlerTransaction, fn: () => Promise<T>): Promise<T> {
    const transaction = handler as LazyTransaction;
    const dataSource = this.resolve();
    const participants = transactionParticipants(dataSource);
    if (
      participants.length === 0 &&
      !this.typeormTransactional &&
      typeormTransactionalName(dataSource) === undefined
    ) {
      return fn();
    }
    return this.joinAll(participants, transaction, fn);
  }

  /**
   * Runs `fn` in a transaction of its own on another connection of the
   * pool, outside of the handler's: TypeORM's `dataSource.transaction()`.
   */
  newTransaction<T>(
    isolationLevel: string | undefined,
    fn: (manager: EntityManager) => Promise<T>,
  ): Promise<T> {
    const dataSource = this.resolve();
    return outsideHandlerTransaction(() =>
      isolationLevel === undefined
        ? dataSource.transaction(fn)
        : dataSource.transaction(
            isolationLevel as IdempotencyIsolationLevel,
            fn,
          ),
    );
  }

  private async joinAll<T>(
    joining: readonly TransactionParticipant[],
    transaction: LazyTransaction,
    fn: () => Promise<T>,
  ): Promise<T> {
    const participants = [...joining];
    const typeormTransactional = await this.typeormTransactionalParticipant();
    if (typeormTransactional) {
      participants.push(typeormTransactional);
    }
    return joinParticipants(participants, transaction, fn);
  }

  /**
   * typeorm-transactional's participant, when it manages the DataSource
   * (`addTransactionalDataSource()`, at bootstrap or later).
   */
  private async typeormTransactionalParticipant(): Promise<
    TransactionParticipant | undefined
  > {
    const dataSource = this.resolve();
    if (!this.typeormTransactional) {
      const name = typeormTransactionalName(dataSource);
      if (name === undefined) {
        return undefined;
      }
      this.typeormTransactional = joinTypeormTransactional(
        dataSource,
        name,
      ).then(({ participant, undo }) => {
        const unbind = this.unbind;
        this.unbind = () => {
          undo();
          unbind?.();
        };
        return participant;
      });
    }
    return this.typeormTransactional;
  }

  private resolve(): DataSource {
    if (this.source) {
      return this.source;
    }
    const token = this.typeorm.getDataSourceToken(this.name);
    let dataSource: unknown;
    try {
      dataSource = this.moduleRef.get(token, { strict: false });
    } catch {
      dataSource = undefined;
    }
    if (!(dataSource instanceof this.typeorm.DataSource)) {
      throw new IdempotencyConfigurationError(
        `IdempotencyModule found no TypeORM DataSource${this.name ? ` named "${this.name}"` : ''}: without a \`store\` option, it keeps its records in PostgreSQL through TypeORM.`,
        'Import TypeOrmModule.forRoot() (or forRootAsync()) in the application module.',
        'Pass `dataSource: <name>` to IdempotencyModule if the DataSource has a name.',
        'Or give IdempotencyModule another store: `IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })` (or a Redis or DynamoDB store).',
      );
    }
    assertPostgresDataSource(dataSource);
    const pool = (dataSource.driver as unknown as { master?: Pool }).master;
    if (!pool) {
      throw new IdempotencyConfigurationError(
        'The DataSource of the idempotency module is not initialized.',
        'Let TypeOrmModule initialize it (the default), or call `dataSource.initialize()` before the application starts.',
      );
    }
    const poolSize = (pool as { options?: { max?: unknown } }).options?.max;
    const level = dataSource.options.isolationLevel;
    if (level !== undefined && !isIsolationLevel(level)) {
      throw new IdempotencyConfigurationError(
        `The DataSource's isolationLevel ${JSON.stringify(level)} is not one of PostgreSQL's.`,
        "Give 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ' or 'SERIALIZABLE'.",
      );
    }
    this.defaultLevel = this.level ?? level;
    this.transactionGate = poolTransactionGate(poolSize);
    this.driverPool = pool;
    this.poolConnection = poolConnection(pool, startupRetry(dataSource));
    this.runners = lazyQueryRunners(dataSource);
    this.unbind = bindAmbientTransaction(dataSource);
    this.source = dataSource;
    return dataSource;
  }
}

/** The retry options of the TypeORM module, or their defaults. */
function startupRetry(
  dataSource: DataSource,
): PostgresConnection['startupRetry'] {
  const { retryAttempts, retryDelay } =
    dataSource.options as TypeOrmRetryOptions;
  return {
    attempts:
      typeof retryAttempts === 'number' && Number.isFinite(retryAttempts)
        ? Math.max(1, Math.floor(retryAttempts))
        : 10,
    maxDelayMs:
      typeof retryDelay === 'number' && Number.isFinite(retryDelay)
        ? Math.max(0, retryDelay)
        : 3_000,
  };
}
