import type { InjectionToken } from '@nestjs/common';
import type { ModuleRef } from '@nestjs/core';
import type { Pool, PoolClient } from 'pg';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  PostgresAdapter,
  PostgresAdapterOptions,
} from '../interfaces/postgres-adapter.interface.js';
import { checkAdapterOptions } from './postgres-adapter-options.js';
import { beginStatement, inTransaction } from './pg-pool-connection.js';
import { PoolDataAccess } from './pool-data-access.js';

/**
 * A handler's transaction on node-postgres: `query()` as a `PoolClient`
 * has it. Its first statement takes a connection of the pool and begins the
 * transaction; the idempotency record commits in it.
 */
export type PgTransaction = Pick<PoolClient, 'query'>;

/** Options of {@link PgIdempotencyAdapter}. */
export interface PgIdempotencyAdapterOptions extends PostgresAdapterOptions {
  /**
   * Injection token of the application's `pg.Pool` (a provider of the
   * application: `{ provide: PG_POOL, useFactory: () => new Pool(...) }`).
   */
  readonly poolToken: InjectionToken;
}

/**
 * The PostgreSQL store on a node-postgres `Pool`, for applications without
 * a data library. The handler writes through its transaction,
 * `IdempotencyContext<PgTransaction>.transaction`: statements sent on the
 * pool itself run outside of it, and commit whatever becomes of the
 * request.
 *
 * @example
 * IdempotencyModule.forRoot({
 *   adapter: new PgIdempotencyAdapter({ poolToken: PG_POOL }),
 * })
 * // In the handler's code:
 * constructor(private readonly idempotency: IdempotencyContext<PgTransaction>) {}
 * await this.idempotency.transaction.query(
 *   'INSERT INTO payments (amount) VALUES ($1)', [dto.amount]);
 */
export class PgIdempotencyAdapter implements PostgresAdapter<PgTransaction> {
  constructor(private readonly options: PgIdempotencyAdapterOptions) {
    checkAdapterOptions('PgIdempotencyAdapter', options);
  }

  /** @internal Finds the pool at start-up. */
  create(moduleRef: ModuleRef): PoolDataAccess<PgTransaction> {
    return new PoolDataAccess(
      () => {
        const pool = lookUp<Pool>(moduleRef, this.options.poolToken, 'pg Pool');
        return {
          pool,
          client: pool,
          handleOf: (client) => client as unknown as PgTransaction,
          newTransaction: (isolationLevel, fn) =>
            inTransaction(pool, beginStatement(isolationLevel), fn),
        };
      },
      {
        where: 'the database of the pg Pool',
        how: 'Apply the SQL files of node_modules/nestjs-idempotency/migrations/sql/ in order (`psql --single-transaction -f <file>`), as the migrations guide shows.',
      },
      this.options,
    );
  }
}

/**
 * @internal The provider of `token`, looked up anywhere in the application.
 * @throws IdempotencyConfigurationError when there is none.
 */
export function lookUp<T>(
  moduleRef: ModuleRef,
  token: InjectionToken,
  what: string,
): T {
  let found: T | undefined;
  try {
    found = moduleRef.get<T>(token, { strict: false });
  } catch {
    found = undefined;
  }
  if (found === undefined || found === null) {
    throw new IdempotencyConfigurationError(
      `IdempotencyModule found no ${what} under the token ${String(typeof token === 'function' ? token.name : token)}.`,
      `Provide the application's ${what} under that token, in a module the application imports (global, or imported by the module that imports IdempotencyModule).`,
    );
  }
  return found;
}
