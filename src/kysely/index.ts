/*
 * The `nestjs-idempotency/kysely` entry: the PostgreSQL store on Kysely
 * with its node-postgres dialect, the handler's transaction typed as
 * Kysely's `Transaction<DB>`.
 */
export {
  KyselyIdempotencyAdapter,
  type KyselyIdempotencyAdapterOptions,
  type KyselyTransaction,
} from './kysely.adapter.js';
