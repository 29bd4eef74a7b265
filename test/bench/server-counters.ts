import pg from 'pg';
import { PRESENCE_APPLICATION_NAME } from '../utils/sessions.js';

/** Statements and transactions one database's sessions ran, as the server counted them. */
export interface ServerCounts {
  /**
   * Top-level statements from `pg_stat_statements` (BEGIN, COMMIT and
   * ROLLBACK included), or `undefined` when the server does not load it.
   */
  readonly statements: number | undefined;
  /** Per normalized statement text, most called first. */
  readonly byStatement: readonly StatementCounts[];
  /** Server time executing and planning the statements (ms), and WAL they wrote (bytes). */
  readonly execMs: number | undefined;
  readonly planMs: number | undefined;
  readonly walBytes: number | undefined;
  /** Committed transactions (`pg_stat_database.xact_commit`), sessions' start-ups excluded. */
  readonly commits: number;
  /** Rolled-back transactions (`pg_stat_database.xact_rollback`). */
  readonly rollbacks: number;
  /**
   * Commit records written to the WAL: the committed transactions that
   * wrote (had a transaction id), synchronous or not; read-only ones write
   * none. Counted with `pg_walinspect` over the whole server; `undefined`
   * where it is not available.
   */
  readonly walCommits: number | undefined;
  /**
   * Times a process flushed (fsync'd) the WAL: see {@link WalFlushSource}.
   * `undefined` where the server counts none (fsync off, or a
   * `wal_sync_method` whose flushes are not counted).
   */
  readonly walFlushes: number | undefined;
}

/**
 * Whose WAL flushes {@link ServerCounts.walFlushes} counts: on PostgreSQL 18
 * and newer, client backends only (`pg_stat_io`, object `wal`), which flush
 * for their synchronous commits and not for asynchronous ones (those the WAL
 * writer flushes); before 18, every process (`pg_stat_wal.wal_sync`), the
 * WAL writer's background flushes included.
 */
export type WalFlushSource = 'client backends' | 'all processes';

/** What `pg_stat_statements` says of one statement. */
export interface StatementCounts {
  readonly query: string;
  readonly calls: number;
  /** Milliseconds executing it, in all. */
  readonly execMs: number;
  /** Milliseconds planning it (0 unless `pg_stat_statements.track_planning` is on). */
  readonly planMs: number;
  /** Bytes of WAL it wrote. */
  readonly walBytes: number;
}

interface DatabaseRow {
  commits: string;
  rollbacks: string;
  sessions: string;
}

/** Where the WAL stood: its insert position, and the flushes counted so far. */
interface WalMark {
  lsn: string;
  flushes: string | null;
}

/**
 * Counts what the sessions of one database (the application's) make the
 * server do, from a session on another database of the same server, so that
 * the counting itself is never counted.
 *
 * `pg_stat_database` is written by each backend at most once a second, and an
 * idle one may sit on its last transactions for ten; a backend that exits
 * writes everything first. So {@link count} ends the database's sessions
 * before and after the work it measures (the application's pool opens new
 * ones), and subtracts the one transaction each new session commits while it
 * starts. `pg_stat_statements` is exact at once. The WAL figures
 * ({@link ServerCounts.walCommits}, {@link ServerCounts.walFlushes}) are the
 * whole server's: exact for a server of the benchmark's own, inflated by
 * whatever other databases do on a shared one. Needs PostgreSQL 14 or newer.
 */
export class ServerCounters {
  private constructor(
    private readonly client: pg.Client,
    private readonly database: string,
    private readonly databaseOid: number,
    /** Whether `pg_stat_statements` is loaded and installed. */
    readonly hasStatements: boolean,
    /** Whether `pg_walinspect` is installed (PostgreSQL 15 and newer). */
    readonly hasWalInspect: boolean,
    /** Whose WAL flushes are counted. */
    readonly walFlushSource: WalFlushSource,
  ) {}

  /**
   * Connects to `monitorUrl` (a database other than `database`) and installs
   * `pg_stat_statements` there if the server preloads it.
   */
  static async open(
    monitorUrl: string,
    database: string,
  ): Promise<ServerCounters> {
    const client = new pg.Client({ connectionString: monitorUrl });
    await client.connect();
    try {
      const [{ oid }] = (
        await client.query<{ oid: number }>(
          'SELECT oid::int AS oid FROM pg_database WHERE datname = $1',
          [database],
        )
      ).rows;
      const [{ preloaded }] = (
        await client.query<{ preloaded: boolean }>(
          `SELECT 'pg_stat_statements' = ANY (string_to_array(
             replace(current_setting('shared_preload_libraries'), ' ', ''), ',')) AS preloaded`,
        )
      ).rows;
      if (preloaded) {
        await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      }
      const [{ version }] = (
        await client.query<{ version: number }>(
          `SELECT current_setting('server_version_num')::int AS version`,
        )
      ).rows;
      let walInspect = false;
      if (version >= 150000) {
        try {
          await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
          walInspect = true;
        } catch {
          // Not shipped with this server, or not ours to install.
        }
        // This session's own statistics (the extensions' commits) go out
        // now, not in the middle of a count.
        await client.query('SELECT pg_stat_force_next_flush()');
      }
      return new ServerCounters(
        client,
        database,
        oid,
        preloaded,
        walInspect,
        version >= 180000 ? 'client backends' : 'all processes',
      );
    } catch (error) {
      await client.end();
      throw error;
    }
  }

  /** Runs one query on the monitoring session. */
  async query<T extends pg.QueryResultRow>(
    sql: string,
    params?: unknown[],
  ): Promise<T[]> {
    return (await this.client.query<T>(sql, params)).rows;
  }

  /**
   * Counts what the database's sessions do while `work` runs. Nothing else
   * may use the database meanwhile (autovacuum aside).
   */
  async count(work: () => Promise<void>): Promise<ServerCounts> {
    await this.endSessions();
    const before = await this.databaseCounters();
    const walBefore = await this.walMark();
    if (this.hasStatements) {
      await this.client.query('SELECT pg_stat_statements_reset(0, $1, 0)', [
        this.databaseOid,
      ]);
    }
    await work();
    await this.endSessions();
    const after = await this.databaseCounters();
    const walAfter = await this.walMark();
    const byStatement = this.hasStatements
      ? (
          await this.client.query<Record<keyof StatementCounts, string>>(
            `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, sum(calls) AS calls,
               sum(total_exec_time) AS "execMs", sum(total_plan_time) AS "planMs",
               sum(wal_bytes) AS "walBytes"
             FROM pg_stat_statements WHERE dbid = $1
             GROUP BY 1 ORDER BY 2 DESC, 1`,
            [this.databaseOid],
          )
        ).rows.map((row) => ({
          query: row.query,
          calls: Number(row.calls),
          execMs: Number(row.execMs),
          planMs: Number(row.planMs),
          walBytes: Number(row.walBytes),
        }))
      : [];
    const sum = (of: 'calls' | 'execMs' | 'planMs' | 'walBytes') =>
      this.hasStatements
        ? byStatement.reduce((total, row) => total + row[of], 0)
        : undefined;
    const delta = (name: keyof DatabaseRow) =>
      Number(after[name]) - Number(before[name]);
    return {
      statements: sum('calls'),
      byStatement,
      execMs: sum('execMs'),
      planMs: sum('planMs'),
      walBytes: sum('walBytes'),
      commits: delta('commits') - delta('sessions'),
      rollbacks: delta('rollbacks'),
      walCommits: await this.walCommits(walBefore.lsn, walAfter.lsn),
      walFlushes:
        walBefore.flushes === null || walAfter.flushes === null
          ? undefined
          : Number(walAfter.flushes) - Number(walBefore.flushes),
    };
  }

  async close(): Promise<void> {
    await this.client.end();
  }

  /**
   * Ends the client sessions of the database; each writes its statistics as
   * it exits. The PostgreSQL store's presence session is left alone: it is
   * the instance's, opened once, not a request's, and ended it would open
   * again in the counted work (its presence lock and its `LISTEN`, two
   * statements each time, counted as the requests'). It runs no statement
   * while requests are served.
   */
  private async endSessions(): Promise<void> {
    await this.client.query(
      `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
       WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
         AND application_name IS DISTINCT FROM $2`,
      [this.database, PRESENCE_APPLICATION_NAME],
    );
  }

  /** The WAL's insert position and the flushes counted so far (after {@link databaseCounters}). */
  private async walMark(): Promise<WalMark> {
    const flushes =
      this.walFlushSource === 'client backends'
        ? `(SELECT sum(fsyncs) FROM pg_stat_io
            WHERE object = 'wal' AND backend_type = 'client backend')`
        : '(SELECT wal_sync FROM pg_stat_wal)';
    const [row] = (
      await this.client.query<WalMark>(
        `SELECT pg_current_wal_insert_lsn()::text AS lsn,
                CASE WHEN current_setting('fsync')::bool THEN ${flushes} END AS flushes`,
      )
    ).rows;
    return row;
  }

  /**
   * Commit records in the WAL between two insert positions, once the WAL
   * writer has flushed them (`pg_walinspect` reads flushed WAL only).
   */
  private async walCommits(
    from: string,
    to: string,
  ): Promise<number | undefined> {
    if (!this.hasWalInspect) {
      return undefined;
    }
    if (from === to) {
      return 0;
    }
    for (let waited = 0; ; waited += 10) {
      const [{ flushed }] = (
        await this.client.query<{ flushed: boolean }>(
          'SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS flushed',
          [to],
        )
      ).rows;
      if (flushed) {
        break;
      }
      if (waited > 10_000) {
        throw new Error(`The WAL up to ${to} was not flushed within 10 s.`);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const [{ commits }] = (
      await this.client.query<{ commits: string | null }>(
        `SELECT sum(count) AS commits FROM pg_get_wal_stats($1, $2, true)
         WHERE "resource_manager/record_type" = 'Transaction/COMMIT'`,
        [from, to],
      )
    ).rows;
    return Number(commits ?? 0);
  }

  private async databaseCounters(): Promise<DatabaseRow> {
    // A fresh snapshot: statistics read earlier in this session are cached.
    await this.client.query('SELECT pg_stat_clear_snapshot()');
    const [row] = (
      await this.client.query<DatabaseRow>(
        `SELECT xact_commit AS commits, xact_rollback AS rollbacks, sessions
         FROM pg_stat_database WHERE datid = $1`,
        [this.databaseOid],
      )
    ).rows;
    return row;
  }
}

/**
 * Samples `pg_stat_activity` from a session on another database: how many
 * sessions of the application's database are busy (running a statement, or
 * inside a transaction: every state but `idle`). A cross-check of the pool
 * count the app keeps itself; a connection the app has checked out but uses
 * for nothing at that instant shows as `idle` and is missed, and so is
 * anything shorter than the interval.
 */
export class ActivitySampler {
  private running?: Promise<void>;
  private stopping = false;
  private max = 0;
  private samples = 0;

  private constructor(
    private readonly client: pg.Client,
    private readonly database: string,
    private readonly intervalMs: number,
  ) {}

  static async open(
    monitorUrl: string,
    database: string,
    intervalMs: number,
  ): Promise<ActivitySampler> {
    const client = new pg.Client({ connectionString: monitorUrl });
    await client.connect();
    return new ActivitySampler(client, database, intervalMs);
  }

  /** Starts sampling, from a maximum of 0. */
  start(): void {
    this.max = 0;
    this.samples = 0;
    this.stopping = false;
    this.running = this.loop();
  }

  /** Stops sampling; the most busy sessions seen at once, and how many samples were taken. */
  async stop(): Promise<{ max: number; samples: number }> {
    this.stopping = true;
    await this.running;
    return { max: this.max, samples: this.samples };
  }

  async close(): Promise<void> {
    this.stopping = true;
    await this.running;
    await this.client.end();
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      // Each statement is a transaction of its own: a fresh snapshot.
      const [{ busy }] = (
        await this.client.query<{ busy: number }>(
          `SELECT count(*)::int AS busy FROM pg_stat_activity
           WHERE datname = $1 AND backend_type = 'client backend'
             AND state IS DISTINCT FROM 'idle'`,
          [this.database],
        )
      ).rows;
      this.max = Math.max(this.max, busy);
      this.samples += 1;
      await new Promise((resolve) => setTimeout(resolve, this.intervalMs));
    }
  }
}
