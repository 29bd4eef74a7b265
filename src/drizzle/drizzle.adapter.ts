import type { InjectionToken } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type {
  PostgresAdapter,
  PostgresAdapterOptions,
  PostgresDataAccess,
} from '../interfaces/postgres-adapter.interface.js';
import { lookUp } from '../pg/pg.adapter.js';
import { PoolDataAccess } from '../pg/pool-data-access.js';
import { checkAdapterOptions } from '../pg/postgres-adapter-options.js';
import { loadDrizzleRuntime } from './drizzle-runtime.js';
import {
  drizzleLibrary,
  type DrizzleDatabase,
  type DrizzleTransaction,
} from './drizzle-transaction.js';

/** Options of {@link DrizzleIdempotencyAdapter}. */
export interface DrizzleIdempotencyAdapterOptions extends PostgresAdapterOptions {
  /**
   * Injection token of the application's Drizzle database (a provider of
   * the application: `{ provide: DRIZZLE, useFactory: () => drizzle({
   * client: pool, schema }) }`), the same as `drizzleInstanceToken` of
   * nestjs-cls's Drizzle adapter. Its `$client` must be a `pg.Pool`.
   */
  readonly drizzleInstanceToken: InjectionToken;
}

/**
 * The PostgreSQL store on Drizzle (`drizzle-orm/node-postgres`, on a
 * `pg.Pool`). The handler writes through its transaction,
 * `IdempotencyContext<DrizzleTransaction<typeof db>>.transaction`, typed as
 * Drizzle types the `tx` of `db.transaction()`; its first statement begins
 * the transaction, in which the idempotency record commits. Statements
 * sent through the application's `db` itself run outside of it, and
 * `db.transaction()` is a transaction of its own on another connection:
 * both commit whatever becomes of the request.
 *
 * @example
 * IdempotencyModule.forRoot({
 *   adapter: new DrizzleIdempotencyAdapter<typeof db>({ drizzleInstanceToken: DRIZZLE }),
 * })
 * // In the handler's code:
 * constructor(private readonly idempotency: IdempotencyContext<DrizzleTransaction<typeof db>>) {}
 * await this.idempotency.transaction.insert(payments).values({ amount: dto.amount });
 */
export class DrizzleIdempotencyAdapter<
  Db extends DrizzleDatabase = NodePgDatabase,
> implements PostgresAdapter<DrizzleTransaction<Db>> {
  constructor(private readonly options: DrizzleIdempotencyAdapterOptions) {
    checkAdapterOptions('DrizzleIdempotencyAdapter', options);
  }

  /** @internal Imports drizzle-orm; finds the database at start-up. */
  async create(
    moduleRef: ModuleRef,
  ): Promise<PostgresDataAccess<DrizzleTransaction<Db>>> {
    const runtime = await loadDrizzleRuntime();
    const token = this.options.drizzleInstanceToken;
    const access = new PoolDataAccess(
      () =>
        drizzleLibrary(
          lookUp<unknown>(moduleRef, token, 'Drizzle database'),
          token,
          runtime,
        ),
      {
        where: 'the database of the Drizzle instance',
        how: 'Apply the SQL files of node_modules/nestjs-idempotency/migrations/sql/ in order, as drizzle-kit custom migrations (`drizzle-kit generate --custom`), as the migrations guide shows.',
      },
      this.options,
    );
    // Drizzle types the transaction of every database alike but for its
    // schema, which only the application's own type names.
    return access as unknown as PostgresDataAccess<DrizzleTransaction<Db>>;
  }
}
