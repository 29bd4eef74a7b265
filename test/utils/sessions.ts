import { until } from './barrier.js';

/** The database helper these functions read the server's views through. */
interface Reader {
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
}

/** `application_name` of the session that holds an instance's presence lock. */
export const PRESENCE_APPLICATION_NAME = 'idempotency-presence';

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
 * Backends of the database of `db` waiting for a lock on `table`, e.g.
 * handlers held by a `LOCK TABLE` of the test.
 */
export async function lockWaiters(
  db: Reader,
  table: string,
): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
     WHERE c.relname = $1 AND NOT l.granted
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     ORDER BY l.pid`,
    [table],
  );
  return rows.map((row) => row.pid);
}

/**
 * Pids of the sessions of the database of `db` (its own aside) that sit idle
 * inside a transaction: a transaction held open between its statements, as a
 * handler's is while it waits. The module's own statements (claims, steps,
 * renewals) are single statements, never idle inside a transaction.
 */
export async function idleInTransaction(db: Reader): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND state LIKE 'idle in transaction%'
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
    pids = await idleInTransaction(db);
    return pids.length === count;
  }, `${count} session(s) idle in a transaction`);
  return pids;
}

/** The session holding an instance's presence lock. */
export interface PresenceBackend {
  readonly pid: number;
  readonly applicationName: string;
  /** Whether its last statement was its LISTEN, done: it is fully set up. */
  readonly listening: boolean;
}

/**
 * The backend holding the presence lock of the instance whose id is
 * `instance` (a row's `owner_instance`), with its `application_name`: the
 * session advisory lock on `hashtextextended('idempotency:' || instance, 0)`,
 * as `pg_locks` shows a bigint key (high and low 32 bits, `objsubid` 1).
 */
export async function presenceBackend(
  db: Reader,
  instance: string,
): Promise<PresenceBackend | undefined> {
  const rows = await db.query<{
    pid: number;
    application_name: string;
    listening: boolean;
  }>(
    `WITH lock AS (SELECT hashtextextended('idempotency:' || $1::text, 0) AS id)
     SELECT l.pid, a.application_name,
            a.state = 'idle' AND a.query LIKE 'LISTEN %' AS listening
     FROM pg_locks l
     JOIN lock ON l.classid::int8 = (lock.id >> 32) & 4294967295
              AND l.objid::int8 = lock.id & 4294967295
     JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [instance],
  );
  return (
    rows[0] && {
      pid: rows[0].pid,
      applicationName: rows[0].application_name,
      listening: rows[0].listening,
    }
  );
}

/** Pids of the presence sessions connected to the database of `db`. */
export async function presenceSessions(db: Reader): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity
     WHERE datname = current_database() AND application_name = $1
     ORDER BY pid`,
    [PRESENCE_APPLICATION_NAME],
  );
  return rows.map((row) => row.pid);
}

/**
 * Ends the backend `pid` of the database of `db` (`pg_terminate_backend`)
 * and waits until it is gone. The database is checked in the same
 * statement: a pid read earlier may belong by now to a backend of another
 * test's database (the operating system reuses pids), which must live.
 */
export async function terminateBackend(db: Reader, pid: number): Promise<void> {
  const [row] = await db.query<{ ended: boolean }>(
    `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity
     WHERE pid = $1 AND datname = current_database()`,
    [pid],
  );
  if (!row?.ended) {
    throw new Error(`Backend ${pid} could not be terminated`);
  }
  await until(
    async () =>
      (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid]))
        .length === 0,
    `backend ${pid} to end`,
  );
}

/**
 * Waits until the presence lock of `instance` is held by a presence session
 * other than `previousPid` (its lost session), which has finished its
 * LISTEN: the instance re-established its presence by itself. Returns the
 * new session's pid.
 */
export async function untilPresenceRestored(
  db: Reader,
  instance: string,
  previousPid: number,
  timeoutMs = 20_000,
): Promise<number> {
  let pid = 0;
  await until(
    async () => {
      const backend = await presenceBackend(db, instance);
      if (
        backend &&
        backend.pid !== previousPid &&
        backend.applicationName === PRESENCE_APPLICATION_NAME &&
        backend.listening
      ) {
        pid = backend.pid;
        return true;
      }
      return false;
    },
    `instance ${instance} to hold its presence lock again`,
    timeoutMs,
  );
  return pid;
}

/**
 * Whether each of `count` statements sent at once through `query` (an
 * application's pool, outside of any handler) runs outside of any
 * transaction: none lands on a pooled connection left inside one. Each
 * holds its connection for 10 ms on the server, so that the statements
 * overlap and take every idle connection; one that did not overlap could
 * only miss a connection, never fail.
 */
export async function pooledOutsideTransactions(
  query: (sql: string) => Promise<unknown>,
  count: number,
): Promise<boolean[]> {
  const rows = await Promise.all(
    Array.from(
      { length: count },
      () =>
        query(
          'SELECT now() = statement_timestamp() AS fresh, pg_sleep(0.01)',
        ) as Promise<Array<{ fresh: boolean }>>,
    ),
  );
  return rows.map(([row]) => row.fresh);
}
