import type { PostgresAdapterOptions } from '../interfaces/postgres-adapter.interface.js';

/** Options of {@link TypeOrmIdempotencyAdapter}. */
export interface TypeOrmIdempotencyAdapterOptions extends PostgresAdapterOptions {
  /**
   * Name of the TypeORM DataSource, as given to `TypeOrmModule.forRoot({
   * name })`.
   * @default the default DataSource
   */
  readonly dataSource?: string;
}
