import type {
  ConnectionProvider,
  DatabaseConnection,
  Kysely,
  KyselyProps,
  QueryExecutor,
  Transaction,
} from 'kysely';
import type { Pool } from 'pg';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { LazyPoolClient } from '../pg/pool-transaction.js';
import { routePool, routeTo } from '../pg/routed-pool.js';

/** @internal What the adapter takes of Kysely at run time. */
export type KyselyRuntime = Pick<
  typeof import('kysely'),
  'PostgresDialect' | 'Transaction'
>;

/**
 * @internal The handles of the handlers' transactions on the application's
 * Kysely: a `Transaction` each, made when the handler first asks for it,
 * whose statements run on the handler's {@link LazyPoolClient} through the
 * application's executor (its plugins) and driver (its logging, its
 * connection hooks), the pool routed (see ../pg/routed-pool.ts).
 *
 * A handle is two small objects (the transaction and its executor), not a
 * Kysely of its own with a dialect, a driver and a logger per request.
 */
export class KyselyHandles<DB> {
  private readonly executor: QueryExecutor;
  /** All a Transaction is built with but its executor. */
  private readonly shell: Omit<KyselyProps, 'executor'>;

  constructor(
    private readonly kysely: KyselyRuntime,
    db: Kysely<DB>,
    pool: Pool,
    /** What the application named its Kysely and its pool, for errors. */
    private readonly names: { readonly kysely: string; readonly pool: string },
  ) {
    routePool(pool);
    this.executor = db.getExecutor();
    // A Transaction is built from the props of a Kysely, which the
    // application's keeps private: a dialect on the same pool stands in for
    // its own, for `introspection`; its driver is never used, as a
    // Transaction starts none of its own.
    const dialect = new kysely.PostgresDialect({ pool });
    this.shell = {
      config: { dialect },
      dialect,
      driver: dialect.createDriver(),
    };
  }

  /** The handle of the handler's transaction of `client`. */
  handleOf(client: LazyPoolClient): Transaction<DB> {
    return new this.kysely.Transaction<DB>({
      ...this.shell,
      executor: this.executor.withConnectionProvider(this.connections(client)),
    });
  }

  /** The application's connections, each routed to `client`. */
  private connections(client: LazyPoolClient): ConnectionProvider {
    const executor = this.executor;
    return {
      provideConnection: (consumer, options) =>
        routeTo(client, (taken) =>
          executor.provideConnection((connection) => {
            if (!taken()) {
              // The Kysely took a connection of another pool: the statement
              // would commit on its own, outside of the handler's.
              throw this.misrouted();
            }
            return consumer(inTransaction(connection));
          }, options),
        ),
    };
  }

  private misrouted(): IdempotencyConfigurationError {
    return new IdempotencyConfigurationError(
      `The Kysely instance under ${this.names.kysely} does not write through the pg Pool under ${this.names.pool}: the handler's statements cannot run in its transaction.`,
      'Give KyselyIdempotencyAdapter the token of the pool that the Kysely’s PostgresDialect was given: `new PostgresDialect({ pool })`.',
    );
  }
}

/**
 * `connection` with streaming refused: the handler's client answers a
 * query with a promise, where a cursor needs its submittable back at once,
 * and a cursor left open would hold the transaction's connection.
 */
function inTransaction(connection: DatabaseConnection): DatabaseConnection {
  return {
    executeQuery: (query, options) => connection.executeQuery(query, options),
    streamQuery() {
      throw new Error(
        'Streaming (`stream()`) is not supported in the transaction of an @Idempotent() handler: use `execute()`, or a keyset-paginated loop.',
      );
    },
    ...(connection.collectSessionInfo && {
      collectSessionInfo: () => connection.collectSessionInfo!(),
    }),
    ...(connection.cancelQuery && {
      cancelQuery: (control) => connection.cancelQuery!(control),
    }),
    ...(connection.killSession && {
      killSession: (control) => connection.killSession!(control),
    }),
  };
}
