/*
 * The `nestjs-idempotency/drizzle/cls` entry: `@nestjs-cls/transactional`'s
 * Drizzle adapter joined to the handlers' transactions. Apart from
 * `nestjs-idempotency/drizzle`, so that an application without nestjs-cls
 * loads none of it.
 */
export {
  IdempotencyTransactionalAdapterDrizzleOrm,
  type IdempotencyDrizzleOrmTransactionalAdapterOptions,
} from './idempotency-drizzle-transactional.adapter.js';
