import type { ModuleRef } from '@nestjs/core';
import type { HandlerTransactions } from './handler-transaction.interface.js';

/** One statement's result, as the PostgreSQL store reads it. */
export interface PostgresResult<Row> {
  /** The rows it returned, their columns by name. */
  readonly rows: Row[];
  /** How many rows it returned or changed. */
  readonly rowCount: number | null;
}

/** One statement of the PostgreSQL store. */
export interface PostgresQuery {
  /** Its SQL, with `$1`, `$2`, ... for its values. */
  readonly text: string;
  /** Its values, in order: strings, numbers, booleans, `null`, Buffers, arrays. */
  readonly values?: unknown[];
  /**
   * The name to prepare it under, once per connection (the text never
   * changes under a name). A client that cannot prepare statements ignores
   * it.
   */
  readonly name?: string;
}

/**
 * What sends the PostgreSQL store's statements: node-postgres's `Pool`,
 * `PoolClient` and `Client` have this shape already.
 */
export interface PostgresClient {
  /** Runs one statement and returns its rows. */
  query<Row>(query: PostgresQuery): Promise<PostgresResult<Row>>;
}

/**
 * A dedicated session (not a pooled connection): the instance's presence,
 * which holds an advisory lock and LISTENs for completions. node-postgres's
 * `Client` has this shape.
 */
export interface PostgresSession extends PostgresClient {
  /** Opens the session. */
  connect(): Promise<unknown>;
  /** Closes it. */
  end(): Promise<unknown>;
  /** Listens for a NOTIFY received, the session breaking, or its end. */
  on(
    event: 'notification',
    listener: (message: { payload?: string }) => void,
  ): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
}

/**
 * How the PostgreSQL store reaches the database outside of the handlers'
 * transactions: the application's own pool, through its data library.
 */
export interface PostgresConnection extends PostgresClient {
  /**
   * Runs `fn` in a short transaction of the store's own (the collector's),
   * on a connection no one else uses meanwhile: `BEGIN`, `fn`, `COMMIT`;
   * `ROLLBACK` when `fn` throws, and a connection that failed is closed,
   * never handed to another request.
   */
  transaction<T>(fn: (client: PostgresClient) => Promise<T>): Promise<T>;
  /**
   * A new dedicated session, not yet open, to the database of the pool
   * with its settings (or to `url`), named `applicationName` (in
   * `pg_stat_activity`).
   */
  session(options: {
    readonly url?: string;
    readonly applicationName: string;
  }): PostgresSession;
  /**
   * How many times the start-up check of the schema is tried, in all, when
   * it loses its connection, and its longest wait between two tries (ms).
   * @default { attempts: 10, maxDelayMs: 3000 }
   */
  readonly startupRetry?: {
    readonly attempts: number;
    readonly maxDelayMs: number;
  };
}

/**
 * A handler's transaction as the PostgreSQL store completes in it: its
 * completion is a statement in that transaction, or nowhere.
 */
export interface PostgresTransaction {
  /**
   * The transaction's connection while it is open; `undefined` before it
   * began, and once it was lost or ended (by the module, or underneath it).
   */
  readonly client: PostgresClient | undefined;
  /**
   * Whether a statement began it, whatever became of it since: from then
   * on, the completion goes in it or nowhere.
   */
  readonly began: boolean;
  /**
   * Why it is no longer open, when it began and the adapter knows (it was
   * ended underneath the module): the completion throws it.
   */
  readonly failure?: Error;
  /**
   * The value the adapter gave the setting `idempotency.transaction` for
   * this transaction alone (`SET LOCAL`, in the query of its `BEGIN`): the
   * completion commits only in a transaction that has it, so that an end
   * sent by hand that begins another transaction at once
   * (`COMMIT AND CHAIN`, `ROLLBACK AND CHAIN`, `COMMIT; BEGIN`) answers
   * `503` rather than storing the record without the handler's writes.
   * `undefined`: not checked (an adapter of its own that sets none).
   */
  readonly mark?: string;
}

/**
 * The data library of the PostgreSQL store, made from the application's
 * client: the store's statements go through `connection`, the handlers'
 * transactions are its {@link HandlerTransactions}, whose transactions are
 * {@link PostgresTransaction}s. Lifecycle hooks it has
 * (`onModuleInit`, `onApplicationBootstrap`, `onApplicationShutdown`) run
 * with the module's.
 */
export interface PostgresDataAccess<
  Transaction = unknown,
> extends HandlerTransactions<Transaction> {
  /**
   * The application's pool; read first at `onModuleInit` of the store, when
   * the application's client can be looked up.
   * @throws IdempotencyConfigurationError when the client is missing or not
   * on PostgreSQL.
   */
  readonly connection: PostgresConnection;
  /**
   * Where the module's tables are and how to add them, for the error that
   * stops an application whose database lacks them: `'the database of the
   * TypeORM DataSource'` and what to run.
   */
  readonly schemaHelp: { readonly where: string; readonly how: string };
  /**
   * The instance's presence session, as the adapter's options set it
   * (see {@link PostgresAdapterOptions.presence}); `undefined`: the
   * module's `presence` option.
   */
  readonly presence?: boolean | { readonly url: string };
}

/** What every adapter of the PostgreSQL store takes, beside its own options. */
export interface PostgresAdapterOptions {
  /**
   * The instance's presence session: one dedicated connection (not from the
   * pool) holding a session advisory lock on the instance's id, so that
   * another instance takes the keys of a crashed one over at once, and
   * listening for the completions that wake `'wait'`-mode duplicates.
   * `true` connects with the pool's own settings; `{ url }` with another URL,
   * such as a direct or session-mode one when the pool goes through
   * PgBouncer in transaction pooling (where a session lock means nothing);
   * `false` turns it off: crashes are then recovered when leases run out,
   * and waiters poll.
   * @default the module's `presence` option (`true`)
   */
  readonly presence?: boolean | { readonly url: string };
  /**
   * Isolation level of the handlers' transactions, unless their route (or
   * the module's `isolationLevel`) says otherwise (the levels of
   * `IdempotencyIsolationLevel`); also the one of
   * `IdempotencyContext.newTransaction()` without a level.
   * @default on TypeORM, the DataSource's `isolationLevel` option; else the
   * server's default (`default_transaction_isolation`)
   */
  readonly isolationLevel?:
    'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';
}

/**
 * The data library the PostgreSQL store works through: TypeORM by default;
 * `nestjs-idempotency/prisma`, `/drizzle`, `/kysely` and `/pg` have the
 * others. The handler's writes and its idempotency record commit in one
 * transaction of that library.
 *
 * `Transaction` is the library's handle of a transaction, as the handler's
 * code gets it (`IdempotencyContext.transaction`).
 */
export interface PostgresAdapter<Transaction = unknown> {
  /**
   * Makes the data access, with `moduleRef` to look up the application's
   * client (by then or later, at `onModuleInit`).
   */
  create(
    moduleRef: ModuleRef,
  ): PostgresDataAccess<Transaction> | Promise<PostgresDataAccess<Transaction>>;
}
