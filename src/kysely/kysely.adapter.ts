import type { InjectionToken } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { Kysely, Transaction } from 'kysely';
import type { Pool } from 'pg';
import { loadRequiredPeer } from '../core/optional-peer.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-options.interface.js';
import type {
  PostgresAdapter,
  PostgresAdapterOptions,
} from '../interfaces/postgres-adapter.interface.js';
import { lookUp } from '../pg/pg.adapter.js';
import { PoolDataAccess } from '../pg/pool-data-access.js';
import { checkAdapterOptions } from '../pg/postgres-adapter-options.js';
import { KyselyHandles } from './kysely-handles.js';

/**
 * A handler's transaction on Kysely, typed by the application's database
 * interface `DB`: Kysely's own `Transaction<DB>`, with the application's
 * plugins and logging. Its first statement takes a connection of the pool
 * and begins the transaction; the idempotency record commits in it.
 *
 * It is a `Transaction`, not a `ControlledTransaction`: its
 * `transaction()`, `startTransaction()` and `connection()` are typed
 * `never` and throw, as in any Kysely transaction; savepoints are plain
 * SQL (see the adapter's guide).
 *
 * @example
 * constructor(private readonly idempotency: IdempotencyContext<KyselyTransaction<Database>>) {}
 * create(dto: CreatePaymentDto) {
 *   return this.idempotency.transaction.insertInto('payments').values(dto).execute();
 * }
 */
export type KyselyTransaction<DB> = Transaction<DB>;

/** Options of {@link KyselyIdempotencyAdapter}. */
export interface KyselyIdempotencyAdapterOptions extends PostgresAdapterOptions {
  /**
   * Injection token of the application's `Kysely` instance (a provider of
   * the application: `{ provide: KYSELY, useFactory: (pool) => new
   * Kysely({ dialect: new PostgresDialect({ pool }) }), inject: [PG_POOL] }`).
   */
  readonly kyselyToken: InjectionToken;
  /**
   * Injection token of the `pg.Pool` that the Kysely's `PostgresDialect`
   * was given. Kysely keeps its dialect's pool private, and the module
   * runs the handlers' transactions and its own statements on that pool:
   * make the pool a provider of its own, and give the dialect that one.
   */
  readonly poolToken: InjectionToken;
}

/**
 * The PostgreSQL store on Kysely with its `PostgresDialect` (node-postgres).
 * The handler writes through its transaction,
 * `IdempotencyContext<KyselyTransaction<DB>>.transaction`: the application's
 * Kysely itself runs outside of it (its statements commit on their own,
 * whatever becomes of the request).
 *
 * @example
 * IdempotencyModule.forRoot({
 *   adapter: new KyselyIdempotencyAdapter({ kyselyToken: KYSELY, poolToken: PG_POOL }),
 * })
 */
export class KyselyIdempotencyAdapter<DB = unknown> implements PostgresAdapter<
  KyselyTransaction<DB>
> {
  constructor(private readonly options: KyselyIdempotencyAdapterOptions) {
    checkAdapterOptions('KyselyIdempotencyAdapter', options);
  }

  /**
   * @internal Imports Kysely, and finds the application's Kysely and pool
   * at start-up.
   */
  async create(
    moduleRef: ModuleRef,
  ): Promise<PoolDataAccess<KyselyTransaction<DB>>> {
    const kysely = await loadRequiredPeer(
      'kysely',
      () => import('kysely'),
      'KyselyIdempotencyAdapter needs kysely, which is not installed.',
    );
    const { kyselyToken, poolToken } = this.options;
    return new PoolDataAccess(
      () => {
        const db = lookUp<Kysely<DB>>(
          moduleRef,
          kyselyToken,
          'Kysely instance',
        );
        const pool = lookUp<Pool>(moduleRef, poolToken, 'pg Pool');
        if (typeof db.getExecutor !== 'function' || db.isTransaction) {
          throw new IdempotencyConfigurationError(
            `The provider under ${nameOf(kyselyToken)} is not a Kysely instance.`,
            'Give KyselyIdempotencyAdapter the token of the application’s `new Kysely({ dialect: new PostgresDialect({ pool }) })`.',
          );
        }
        const handles = new KyselyHandles(kysely, db, pool, {
          kysely: nameOf(kyselyToken),
          pool: nameOf(poolToken),
        });
        return {
          pool,
          client: db,
          handleOf: (client) => handles.handleOf(client),
          newTransaction: (isolationLevel, fn) =>
            (isolationLevel
              ? db.transaction().setIsolationLevel(
                  // Kysely names the same levels in lower case.
                  isolationLevel.toLowerCase() as Lowercase<IdempotencyIsolationLevel>,
                )
              : db.transaction()
            ).execute(fn),
        };
      },
      {
        where: 'the database of the Kysely instance',
        how: 'Apply the SQL files of node_modules/nestjs-idempotency/migrations/sql/ in order, e.g. with a Kysely Migrator, as the migrations guide shows.',
      },
      this.options,
    );
  }
}

/** How an error names an injection token. */
function nameOf(token: InjectionToken): string {
  return String(typeof token === 'function' ? token.name : token);
}
