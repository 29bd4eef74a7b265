import {
  Inject,
  Injectable,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { assertPostgresDataSource } from '../stores/postgres/postgres-data-source.js';
import { bindAmbientTransaction } from './ambient-transaction.js';
import { LazyTransaction } from './lazy-transaction.js';
import { TransactionGate } from './transaction-gate.js';

/**
 * @internal The module's side of TypeORM: the application's DataSource (the
 * default one, or the one named by the `dataSource` option), whose manager,
 * repositories and `query()` are bound to the ambient transaction of the
 * decorated handler running, and the share of its pool that handler
 * transactions may hold.
 */
@Injectable()
export class IdempotencyDataSource
  implements OnModuleInit, OnApplicationShutdown
{
  private source: DataSource | undefined;
  private driverPool: Pool | undefined;
  private unbind?: () => void;
  private transactionGate = new TransactionGate(Infinity);

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onModuleInit(): void {
    this.resolve();
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

  /** The transactions of handlers open now, and how many may be. */
  get gate(): TransactionGate {
    return this.transactionGate;
  }

  /** A transaction for a handler, begun by its first statement. */
  transaction(deadline: number): LazyTransaction {
    return new LazyTransaction(this.resolve(), this.transactionGate, deadline);
  }

  private resolve(): DataSource {
    if (this.source) {
      return this.source;
    }
    const token = getDataSourceToken(this.options.dataSource);
    let dataSource: unknown;
    try {
      dataSource = this.moduleRef.get(token, { strict: false });
    } catch {
      dataSource = undefined;
    }
    if (!(dataSource instanceof DataSource)) {
      throw new IdempotencyConfigurationError(
        `IdempotencyModule found no TypeORM DataSource${this.options.dataSource ? ` named "${this.options.dataSource}"` : ''}.`,
        'Import TypeOrmModule.forRoot() (or forRootAsync()) in the application module.',
        'Pass `dataSource: <name>` to IdempotencyModule if the DataSource has a name.',
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
    if (typeof poolSize === 'number' && poolSize > 1) {
      this.transactionGate = new TransactionGate(poolSize - 1);
    }
    this.driverPool = pool;
    this.unbind = bindAmbientTransaction(dataSource);
    this.source = dataSource;
    return dataSource;
  }
}
