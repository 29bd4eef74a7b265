import type { Client, ClientConfig, Pool, PoolClient } from 'pg';
import type {
  PostgresClient,
  PostgresConnection,
} from '../interfaces/postgres-adapter.interface.js';

/** What node-postgres's Pool keeps of how it makes its clients. */
interface PoolInternals {
  /** The client class it makes its connections with. */
  readonly Client: new (config: ClientConfig) => Client;
  /** The configuration it makes them with. */
  readonly options: ClientConfig;
}

/**
 * @internal The PostgreSQL store's connection on a node-postgres `Pool`: the
 * pool of the application's data library (TypeORM's driver, Drizzle's and
 * Kysely's node-postgres dialects, Prisma's `@prisma/adapter-pg`, or the
 * application's own). Sessions are made by the pool's own client class
 * with the pool's own settings (pg's `Pool` keeps them as `Client` and
 * `options`: not in its typings).
 */
export function poolConnection(
  pool: Pool,
  startupRetry?: PostgresConnection['startupRetry'],
): PostgresConnection {
  const statements: PostgresClient = pool;
  return {
    query: (query) => statements.query(query),
    transaction: (fn) => inTransaction(pool, 'BEGIN', fn),
    session({ url, applicationName }) {
      const { Client: SessionClient, options } =
        pool as unknown as PoolInternals;
      return new SessionClient({
        ...(url === undefined ? options : { connectionString: url }),
        application_name: applicationName,
      });
    },
    startupRetry,
  };
}

/**
 * @internal Runs `fn` on a connection of `pool` of its own, in a
 * transaction begun by `begin`: COMMIT when `fn` resolves; ROLLBACK when it
 * throws, and the connection closed rather than handed to another request.
 */
export async function inTransaction<T>(
  pool: Pool,
  begin: string,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query(begin);
    const result = await fn(client);
    await client.query('COMMIT');
    client.release();
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
}

/** @internal The statement that begins a transaction at `isolationLevel` (the server's default without one). */
export function beginStatement(isolationLevel: string | undefined): string {
  return isolationLevel
    ? `START TRANSACTION ISOLATION LEVEL ${isolationLevel}`
    : 'START TRANSACTION';
}
