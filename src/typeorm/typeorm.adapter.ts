import type { ModuleRef } from '@nestjs/core';
import type { EntityManager } from 'typeorm';
import type { PostgresAdapter } from '../interfaces/postgres-adapter.interface.js';
import type { TypeOrmIdempotencyAdapterOptions } from './typeorm-adapter.options.js';
import { checkAdapterOptions } from '../pg/postgres-adapter-options.js';
import { IdempotencyDataSource } from './idempotency-data-source.js';
import { loadTypeormRuntime } from './typeorm-runtime.js';

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
  constructor(private readonly options: TypeOrmIdempotencyAdapterOptions = {}) {
    checkAdapterOptions('TypeOrmIdempotencyAdapter', options);
  }

  /** @internal Imports TypeORM, and binds the DataSource once it is found. */
  async create(moduleRef: ModuleRef): Promise<IdempotencyDataSource> {
    return new IdempotencyDataSource(
      moduleRef,
      this.options,
      await loadTypeormRuntime(),
    );
  }
}
