/*
 * The `nestjs-idempotency/prisma/cls` entry: `@nestjs-cls/transactional`'s
 * Prisma adapter joined to the handlers' transactions. Apart from
 * `nestjs-idempotency/prisma`, so that an application without nestjs-cls
 * loads none of it.
 */
export {
  IdempotencyTransactionalAdapterPrisma,
  type IdempotencyPrismaTransactionalAdapterOptions,
} from './idempotency-prisma-transactional.adapter.js';
