/*
 * The `nestjs-idempotency/typeorm` entry: the PostgreSQL store's adapter of
 * TypeORM, the module's default. Needed only to name a DataSource.
 */
export { TypeOrmIdempotencyAdapter } from './typeorm.adapter.js';
export type { TypeOrmIdempotencyAdapterOptions } from './typeorm-adapter.options.js';
