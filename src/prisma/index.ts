/*
 * The `nestjs-idempotency/prisma` entry: the PostgreSQL store on Prisma 7
 * with `@prisma/adapter-pg`.
 */
export {
  PrismaIdempotencyAdapter,
  type PrismaIdempotencyAdapterOptions,
} from './prisma.adapter.js';
export {
  type PrismaClientLike,
  type PrismaIsolationLevel,
  type PrismaTransaction,
  type PrismaTransactionOptions,
} from './prisma-client.js';
