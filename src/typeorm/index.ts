/*
 * The `nestjs-idempotency/typeorm` entry: the PostgreSQL store's adapter of
 * TypeORM, the module's default. Needed only to name a DataSource.
 */
export {
  TypeOrmIdempotencyAdapter,
  type TypeOrmIdempotencyAdapterOptions,
} from './typeorm.adapter.js';
