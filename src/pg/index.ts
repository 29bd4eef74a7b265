/*
 * The `nestjs-idempotency/pg` entry: the PostgreSQL store on a
 * node-postgres Pool, for applications without a data library.
 */
export {
  PgIdempotencyAdapter,
  type PgIdempotencyAdapterOptions,
  type PgTransaction,
} from './pg.adapter.js';
