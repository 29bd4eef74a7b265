import type { InjectionToken } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { Pool } from 'pg';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  PostgresAdapter,
  PostgresAdapterOptions,
} from '../interfaces/postgres-adapter.interface.js';
import { lookUp } from '../pg/pg.adapter.js';
import { checkAdapterOptions } from '../pg/postgres-adapter-options.js';
import {
  PRISMA_PG,
  prismaDriver,
  type PrismaClientLike,
  type PrismaTransaction,
} from './prisma-client.js';
import { PrismaDataAccess } from './prisma-data-access.js';

/** Options of {@link PrismaIdempotencyAdapter}. */
export interface PrismaIdempotencyAdapterOptions extends PostgresAdapterOptions {
  /**
   * Injection token of the application's `PrismaClient` (a provider of
   * the application, such as a `PrismaService` that extends it), made with
   * `@prisma/adapter-pg` on a pg `Pool`: `new PrismaClient({ adapter: new
   * PrismaPg(pool) })`. nestjs-cls names it `prismaInjectionToken`.
   */
  readonly prismaToken: InjectionToken;
  /**
   * Injection token of the pg `Pool` given to `PrismaPg`, for a PrismaClient
   * that does not keep it where Prisma 7 does.
   * @default the pool the PrismaClient's `PrismaPg` was given
   */
  readonly poolToken?: InjectionToken;
}

/**
 * The PostgreSQL store on Prisma 7 with its `@prisma/adapter-pg` driver
 * adapter: the handler writes through its interactive transaction,
 * `IdempotencyContext<PrismaTransaction<PrismaClient>>.transaction`, in
 * which the idempotency record commits. That transaction begins with the
 * handler's first statement through it (until then the request holds no
 * connection) and ends at the module's deadline (`transactionTimeout`),
 * whatever Prisma's own `timeout`. Statements sent on the PrismaClient
 * itself run outside of it, and commit whatever becomes of the request.
 *
 * `PrismaPg` must be given a pg `Pool` (`new PrismaPg(pool)`), not its
 * settings: the module runs the handlers' transactions and its own
 * statements on that pool.
 *
 * @example
 * IdempotencyModule.forRoot({
 *   adapter: new PrismaIdempotencyAdapter({ prismaToken: PrismaService }),
 * })
 * // In the handler's code:
 * constructor(private readonly idempotency: IdempotencyContext<PrismaTransaction<PrismaClient>>) {}
 * await this.idempotency.transaction.payment.create({ data: { amount } });
 */
export class PrismaIdempotencyAdapter<
  Client extends PrismaClientLike = PrismaClientLike,
> implements PostgresAdapter<PrismaTransaction<Client>> {
  constructor(private readonly options: PrismaIdempotencyAdapterOptions) {
    checkAdapterOptions('PrismaIdempotencyAdapter', options);
  }

  /** @internal Finds the PrismaClient and its pool at start-up. */
  create(moduleRef: ModuleRef): PrismaDataAccess<PrismaTransaction<Client>> {
    return new PrismaDataAccess(() => {
      const { prismaToken, poolToken } = this.options;
      const prisma = lookUp<PrismaClientLike>(
        moduleRef,
        prismaToken,
        'PrismaClient',
      );
      const driver = prismaDriver(prisma);
      if (driver?.name !== undefined && driver.name !== PRISMA_PG) {
        throw new IdempotencyConfigurationError(
          `The PrismaClient runs on the driver adapter ${driver.name}: the idempotency module runs on ${PRISMA_PG} only.`,
          `Make the PrismaClient with \`new PrismaPg(pool)\` of ${PRISMA_PG}.`,
        );
      }
      const pool = poolToken
        ? lookUp<Pool>(moduleRef, poolToken, 'pg Pool')
        : driver?.pool;
      if (!pool) {
        throw new IdempotencyConfigurationError(
          `The idempotency module found no pg Pool under the PrismaClient: it runs on ${PRISMA_PG} given a pg Pool.`,
          'Give PrismaPg the application’s pg.Pool: `new PrismaClient({ adapter: new PrismaPg(pool) })` (PrismaPg given settings makes a pool the module cannot reach).',
          'Or give PrismaIdempotencyAdapter that pool’s injection token: `new PrismaIdempotencyAdapter({ prismaToken, poolToken })`.',
        );
      }
      return { prisma, pool };
    }, this.options);
  }
}
