/*
 * The `nestjs-idempotency/drizzle` entry: the PostgreSQL store on Drizzle
 * (drizzle-orm on node-postgres). It loads drizzle-orm only when the
 * adapter is used.
 */
export {
  DrizzleIdempotencyAdapter,
  type DrizzleIdempotencyAdapterOptions,
} from './drizzle.adapter.js';
export type { DrizzleTransaction } from './drizzle-transaction.js';
