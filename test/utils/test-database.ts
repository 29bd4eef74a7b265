import { randomUUID } from 'node:crypto';
import pg from 'pg';

/** A database of its own for one test file, on the suite's server. */
export interface TestDatabase {
  /** Connection URL of the new database. */
  readonly url: string;
  /** Runs one SQL statement on the new database. */
  query<T = Record<string, unknown>>(
    sql: string,
    params?: unknown[],
  ): Promise<T[]>;
  /** Closes the helper connection and drops the database. */
  drop(): Promise<void>;
}

function serverUrl(): URL {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error('DATABASE_URL is not set: run the suite with `npm test`.');
  }
  return new URL(url);
}

/**
 * Runs `sql` on the suite's server, outside of any test's database: for what
 * a session cannot do to its own database (`CREATE`, `DROP`, `ALTER
 * DATABASE ... ALLOW_CONNECTIONS`).
 */
export async function onServer(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl().href });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Creates an empty database; no test depends on another's leftovers. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `idem_${randomUUID().replaceAll('-', '').slice(0, 20)}`;
  await onServer(`CREATE DATABASE "${name}"`);
  const url = serverUrl();
  url.pathname = `/${name}`;
  const client = new pg.Client({ connectionString: url.href });
  // A connection the server ends (e.g. as the suite stops) must not crash the worker.
  client.on('error', () => undefined);
  await client.connect();
  return {
    url: url.href,
    async query<T>(sql: string, params?: unknown[]) {
      const result = await client.query(sql, params);
      return result.rows as T[];
    },
    async drop() {
      await client.end();
      await onServer(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
  };
}

/** Locks held by a transaction of another session, until released. */
export interface HeldLocks {
  /** Rolls the transaction back (freeing its locks) and disconnects. */
  release(): Promise<void>;
}

/**
 * Opens a transaction on a session of its own and runs `sql` in it (e.g. to
 * take an advisory or table lock), leaving the transaction open: tests force
 * interleavings with the locks it holds.
 */
export async function holdInTransaction(
  url: string,
  sql: string,
  params: unknown[] = [],
): Promise<HeldLocks> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query('BEGIN');
    await client.query(sql, params);
  } catch (error) {
    await client.end();
    throw error;
  }
  let released = false;
  return {
    async release() {
      if (!released) {
        released = true;
        await client.query('ROLLBACK').catch(() => undefined);
        await client.end();
      }
    },
  };
}
