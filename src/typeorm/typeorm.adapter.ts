import type { ModuleRef } from '@nestjs/core';
import type { EntityManager } from 'typeorm';
import type { PostgresAdapter } from '../interfaces/postgres-adapter.interface.js';
import { IdempotencyDataSource } from './idempotency-data-source.js';
import { loadTypeormRuntime } from './typeorm-runtime.js';

/** Options of {@link TypeOrmIdempotencyAdapter}. */
export interface TypeOrmIdempotencyAdapterOptions {
  /**
   * Name of the TypeORM DataSource, as given to `TypeOrmModule.forRoot({
   * name })`.
   * @default the default DataSource
   */
  readonly dataSource?: string;
}

/**
 * The PostgreSQL store on TypeORM: the module's default, which needs no
 * option for the default DataSource. The handler writes through the
 * application's repositories, managers and `dataSource.query()` as usual
 * (they go through the handler's transaction while it runs), or through
 * `IdempotencyContext.manager`.
 *
 * @example
 * IdempotencyModule.forRoot({
 *   adapter: new TypeOrmIdempotencyAdapter({ dataSource: 'payments' }),
 * })
 */
export class TypeOrmIdempotencyAdapter implements PostgresAdapter<EntityManager> {
  constructor(
    private readonly options: TypeOrmIdempotencyAdapterOptions = {},
  ) {}

  /** @internal Imports TypeORM, and binds the DataSource once it is found. */
  async create(moduleRef: ModuleRef): Promise<IdempotencyDataSource> {
    return new IdempotencyDataSource(
      moduleRef,
      this.options.dataSource,
      await loadTypeormRuntime(),
    );
  }
}
