import pg from 'pg';

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
}

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
 * starts. `pg_stat_statements` is exact at once. Needs PostgreSQL 14 or newer.
 */
export class ServerCounters {
  private constructor(
    private readonly client: pg.Client,
    private readonly database: string,
    private readonly databaseOid: number,
    /** Whether `pg_stat_statements` is loaded and installed. */
    readonly hasStatements: boolean,
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
      return new ServerCounters(client, database, oid, preloaded);
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
    if (this.hasStatements) {
      await this.client.query('SELECT pg_stat_statements_reset(0, $1, 0)', [
        this.databaseOid,
      ]);
    }
    await work();
    await this.endSessions();
    const after = await this.databaseCounters();
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
    };
  }

  async close(): Promise<void> {
    await this.client.end();
  }

  /** Ends the client sessions of the database; each writes its statistics as it exits. */
  private async endSessions(): Promise<void> {
    await this.client.query(
      `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
       WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      [this.database],
    );
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
