import { until } from './barrier.js';

/** The database helper these functions read `pg_stat_activity` through. */
interface Reader {
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
}

/** A session of the database, as `pg_stat_activity` shows it. */
export interface Session {
  readonly pid: number;
  readonly applicationName: string;
  readonly state: string | null;
}

/**
 * The sessions of the database of `db` other than the reader's own (and
 * PostgreSQL's background processes), ordered by pid.
 */
export async function sessions(db: Reader): Promise<Session[]> {
  const rows = await db.query<{
    pid: number;
    application_name: string;
    state: string | null;
  }>(
    `SELECT pid, application_name, state FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND backend_type = 'client backend'
     ORDER BY pid`,
  );
  return rows.map((row) => ({
    pid: row.pid,
    applicationName: row.application_name,
    state: row.state,
  }));
}

/**
 * Pids of the sessions of the database of `db` (its own aside) that are
 * inside a transaction: idle in it, or running a statement of it.
 */
export async function inTransaction(db: Reader): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND backend_type = 'client backend' AND xact_start IS NOT NULL
     ORDER BY pid`,
  );
  return rows.map((row) => row.pid);
}

/**
 * Waits until exactly `count` sessions of the database of `db` (its own
 * aside) sit idle inside a transaction, and returns their pids.
 */
export async function untilIdleInTransaction(
  db: Reader,
  count: number,
): Promise<number[]> {
  let pids: number[] = [];
  await until(async () => {
    const rows = await db.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()
         AND state LIKE 'idle in transaction%'
       ORDER BY pid`,
    );
    pids = rows.map((row) => row.pid);
    return pids.length === count;
  }, `${count} session(s) idle in a transaction`);
  return pids;
}
