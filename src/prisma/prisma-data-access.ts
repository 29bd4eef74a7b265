import { Logger, type OnModuleInit } from '@nestjs/common';
import type { Pool } from 'pg';
import { ownStatement } from '../core/own-statement.js';
import { AbandonedTransactionError } from '../core/transaction.errors.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import type {
  PostgresAdapterOptions,
  PostgresConnection,
  PostgresDataAccess,
} from '../interfaces/postgres-adapter.interface.js';
import { PoolDataAccess } from '../pg/pool-data-access.js';
import { routePool } from '../pg/routed-pool.js';
import {
  prismaDefaultLevel,
  prismaLevel,
  type PrismaClientLike,
} from './prisma-client.js';
import { withDriverError } from './prisma-errors.js';
import { PrismaHandlerTransaction } from './prisma-transaction.js';

const logger = new Logger('Idempotency');

/** @internal The application's PrismaClient, and the pool PrismaPg writes through. */
export interface PrismaLibrary {
  readonly prisma: PrismaClientLike;
  readonly pool: Pool;
}

/**
 * @internal The PostgreSQL store's data access on Prisma with
 * `@prisma/adapter-pg`: the store's own statements go on PrismaPg's pool
 * (the pg adapter's machinery, {@link PoolDataAccess}), and the handlers'
 * transactions are {@link PrismaHandlerTransaction}s on that pool.
 */
export class PrismaDataAccess<Tx>
  implements PostgresDataAccess<Tx>, OnModuleInit
{
  private readonly pools: PoolDataAccess<Tx>;
  /** Whether Prisma was seen beginning a transaction elsewhere (logged once). */
  private misrouted = false;
  private library:
    (PrismaLibrary & { level?: IdempotencyIsolationLevel }) | undefined;

  constructor(
    /** Finds the client and its pool in the application; called once, at start-up. */
    find: () => PrismaLibrary,
    /** The adapter's `presence` and `isolationLevel`. */
    private readonly options: PostgresAdapterOptions = {},
  ) {
    this.pools = new PoolDataAccess<Tx>(
      () => {
        const { prisma, pool } = find();
        routePool(pool);
        this.library = { prisma, pool, level: prismaDefaultLevel(prisma) };
        return {
          pool,
          client: prisma,
          handleOf: () => {
            throw new Error('A Prisma transaction has no handle of its own');
          },
          newTransaction: (level, fn) =>
            prisma.$transaction(
              (tx) => fn(tx as Tx),
              level ? { isolationLevel: prismaLevel(level) } : undefined,
            ) as ReturnType<typeof fn>,
        };
      },
      {
        where: 'the database of the PrismaClient',
        how: 'Apply the SQL files of node_modules/nestjs-idempotency/migrations/sql/ in a migration of their own (`prisma migrate dev --create-only`, then the files in its migration.sql), as the migrations guide shows.',
      },
      options,
    );
  }

  get presence(): PostgresAdapterOptions['presence'] {
    return this.pools.presence;
  }

  get schemaHelp(): PostgresDataAccess['schemaHelp'] {
    return this.pools.schemaHelp;
  }

  get connection(): PostgresConnection {
    return this.pools.connection;
  }

  onModuleInit(): void {
    this.pools.onModuleInit();
  }

  /**
   * A transaction at `isolationLevel`, by default the adapter's, else the
   * PrismaClient's (`transactionOptions.isolationLevel`), else the
   * server's.
   */
  begin(
    deadline: number,
    isolationLevel?: string,
  ): PrismaHandlerTransaction<Tx> {
    const { prisma, level } = this.resolve();
    return new PrismaHandlerTransaction(
      this.pools.begin(
        deadline,
        isolationLevel ?? this.options.isolationLevel ?? level,
      ),
      prisma,
      deadline,
    );
  }

  /**
   * Opens Prisma's side of `transaction` (no connection yet), then runs the
   * handler, `fn`, with the transaction libraries that joined the
   * PrismaClient seeing it as their current one.
   */
  async join<T>(
    transaction: HandlerTransaction,
    fn: () => Promise<T>,
  ): Promise<T> {
    const handler = transaction as PrismaHandlerTransaction<Tx>;
    // A failure to open it is the module's, not the handler's (503).
    await ownStatement(() => handler.open()).catch((error: unknown) => {
      if (error instanceof IdempotencyConfigurationError && !this.misrouted) {
        // Every request answers 503 until the application is fixed.
        this.misrouted = true;
        logger.error(error.message);
      }
      throw error;
    });
    if (handler.state === 'ended') {
      // Abandoned at its deadline while Prisma opened it.
      throw new AbandonedTransactionError();
    }
    try {
      return await this.pools.join(transaction, fn);
    } catch (error) {
      throw withDriverError(error);
    } finally {
      handler.returned();
    }
  }

  newTransaction<T>(
    isolationLevel: string | undefined,
    fn: (handle: Tx) => Promise<T>,
  ): Promise<T> {
    return this.pools.newTransaction(isolationLevel, fn);
  }

  private resolve(): PrismaLibrary & { level?: IdempotencyIsolationLevel } {
    if (!this.library) {
      this.pools.onModuleInit();
    }
    return this.library!;
  }
}
