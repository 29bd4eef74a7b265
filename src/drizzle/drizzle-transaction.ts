import type { InjectionToken } from '@nestjs/common';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import type {
  NodePgDatabase,
  NodePgSessionOptions,
} from 'drizzle-orm/node-postgres';
import type { PgTransactionConfig } from 'drizzle-orm/pg-core';
import type { Pool, PoolClient } from 'pg';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { PoolLibrary } from '../pg/pool-data-access.js';
import type { DrizzleRuntime } from './drizzle-runtime.js';
import { translateQueryErrors } from './drizzle-query-errors.js';

/** The schema of a Drizzle database, whatever it is. */
type Schema = Record<string, unknown>;
type Relations = ExtractTablesWithRelations<Schema>;

/** A Drizzle database on node-postgres, whatever its schema. */
export type DrizzleDatabase = NodePgDatabase<Schema>;

/**
 * A handler's transaction on Drizzle, typed as Drizzle types the `tx` of
 * `db.transaction((tx) => ...)` on the application's database `Db`
 * (`typeof db`): its query builders, its relational queries (`tx.query`)
 * of the schema given to `drizzle()`, `execute()`, and `transaction()`, a
 * savepoint of it. Its first statement takes a connection of the pool and
 * begins the transaction; the idempotency record commits in it.
 *
 * @example
 * constructor(private readonly idempotency: IdempotencyContext<DrizzleTransaction<typeof db>>) {}
 * await this.idempotency.transaction.insert(payments).values({ amount: dto.amount });
 */
export type DrizzleTransaction<Db extends DrizzleDatabase = NodePgDatabase> =
  Parameters<Parameters<Db['transaction']>[0]>[0];

/** What Drizzle keeps of a database beside its public API. */
interface DatabaseInternals {
  /** `PgDatabase.dialect` (`@internal`): its SQL dialect, with its `casing`. */
  readonly dialect?: unknown;
  /** What `drizzle()` was given: a `Pool` (or a `Client`). */
  readonly $client?: unknown;
}

/** What Drizzle keeps of a node-postgres session beside its public API. */
interface SessionInternals {
  /** `NodePgSession.options` (private): the database's logger and cache. */
  readonly options?: NodePgSessionOptions;
}

/**
 * @internal Drizzle on node-postgres as the pool machinery of `../pg/` works
 * it: the handler's transaction is a real `NodePgTransaction` on a session
 * of its own over the transaction's lazy client, made as Drizzle makes the
 * `tx` of `db.transaction()` (with the database's dialect, schema, logger
 * and cache), so that `tx.transaction()` is a savepoint of it.
 * @throws IdempotencyConfigurationError when `db` is not a Drizzle database
 * on a node-postgres `Pool`.
 */
export function drizzleLibrary(
  db: unknown,
  token: InjectionToken,
  runtime: DrizzleRuntime,
): PoolLibrary<DrizzleTransaction<DrizzleDatabase>> {
  const { is, NodePgDatabase, NodePgSession, NodePgTransaction, PgDialect } =
    runtime;
  const name = String(typeof token === 'function' ? token.name : token);
  if (!is(db, NodePgDatabase)) {
    throw new IdempotencyConfigurationError(
      `The provider of ${name} is not a Drizzle database on node-postgres.`,
      'Provide the database that `drizzle()` of `drizzle-orm/node-postgres` returns, made on a `pg.Pool`: `drizzle({ client: pool, schema })`.',
    );
  }
  const database = db as DrizzleDatabase;
  const { dialect, $client: pool } = database as DatabaseInternals;
  const session = database._.session;
  if (!is(dialect, PgDialect) || !is(session, NodePgSession)) {
    throw new IdempotencyConfigurationError(
      `The Drizzle database of ${name} does not keep its dialect and session where drizzle-orm 0.45 does.`,
      'Use drizzle-orm 0.45 (the versions nestjs-idempotency/drizzle supports), or the pg adapter with a Drizzle database of your own on its transaction.',
    );
  }
  if (typeof (pool as Partial<Pool> | undefined)?.totalCount !== 'number') {
    throw new IdempotencyConfigurationError(
      `The Drizzle database of ${name} is not made on a node-postgres Pool.`,
      'Make it on a `pg.Pool`: `drizzle({ client: new Pool({ connectionString }) })`, or `drizzle(connectionString)`: the module runs each handler’s transaction on a connection of that pool.',
    );
  }
  const { schema, fullSchema, tableNamesMap } = database._;
  const relational = schema && { schema, fullSchema, tableNamesMap };
  const { options } = session as unknown as SessionInternals;
  return {
    pool: pool as Pool,
    client: database,
    handleOf(client) {
      const handlerSession = new NodePgSession<Schema, Relations>(
        client as unknown as PoolClient,
        dialect,
        relational,
        options,
      );
      translateQueryErrors(handlerSession);
      return new NodePgTransaction<Schema, Relations>(
        dialect,
        handlerSession,
        relational,
      );
    },
    newTransaction: (isolationLevel, fn) =>
      database.transaction(
        fn,
        isolationLevel && {
          isolationLevel:
            isolationLevel.toLowerCase() as PgTransactionConfig['isolationLevel'],
        },
      ),
  };
}
