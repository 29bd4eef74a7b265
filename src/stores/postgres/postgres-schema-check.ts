import { Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PostgresConnection } from '../../interfaces/postgres-adapter.interface.js';
import { isConnectionFailure, sqlState } from '../../core/failures.js';
import { messageOf } from '../../core/error-message.js';

/** Attempts in all, unless the connection says otherwise. */
const DEFAULT_ATTEMPTS = 10;
/** Longest wait between two attempts, unless the connection says otherwise. */
const DEFAULT_MAX_DELAY_MS = 3_000;
/** The first wait: a terminated backend is replaced at once. */
const FIRST_DELAY_MS = 100;

/** What the database has of the shipped migrations. */
export interface PostgresSchema {
  /** Whether the record table exists. */
  readonly ready: boolean;
  /**
   * The schema the record table was found in, by the connection's
   * `search_path` (none: no such table).
   */
  readonly schema: string | null;
  /** Whether every function of `functions` exists. */
  readonly functions: boolean;
  /** Whether every column of `columns` exists. */
  readonly columns: boolean;
  /** Whether every table of `tables` exists. */
  readonly tables: boolean;
}

/**
 * @internal Reads, at start-up, whether the database has the
 * record table `table`, the functions `functions` (signatures, as
 * `to_regprocedure` takes them), the columns `columns` (table, column)
 * and the tables `tables`.
 *
 * A connection lost meanwhile (a terminated backend, a server restarting or
 * out of reach: see {@link isConnectionFailure}) must not stop the
 * application: the check runs again on a new connection, after a wait that
 * starts at 100 ms and doubles up to the connection's `startupRetry`
 * (3000 ms and 10 attempts in all by default; on TypeORM, the module's
 * `retryDelay` and `retryAttempts`, with which `@nestjs/typeorm` retries
 * its own connection). Each retry is logged (context `Idempotency`). Any other error
 * (authentication, a database that does not exist or refuses connections,
 * a permission) is thrown at once, as is the last connection failure.
 */
export async function readPostgresSchema(
  connection: PostgresConnection,
  table: string,
  functions: readonly string[],
  columns: ReadonlyArray<readonly [table: string, column: string]>,
  tables: readonly string[] = [],
  logger = new Logger('Idempotency'),
): Promise<PostgresSchema> {
  const { attempts, maxDelayMs } = connection.startupRetry ?? {
    attempts: DEFAULT_ATTEMPTS,
    maxDelayMs: DEFAULT_MAX_DELAY_MS,
  };
  for (let attempt = 1; ; attempt += 1) {
    try {
      const { rows } = await connection.query<PostgresSchema>({
        text: `SELECT to_regclass($1) IS NOT NULL AS ready,
                (SELECT n.nspname FROM pg_class c
                  JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = to_regclass($1)) AS schema,
                coalesce(bool_and(to_regprocedure(f) IS NOT NULL), false) AS functions,
                (SELECT count(*) FROM unnest($3::text[], $4::text[]) AS c(t, name)
                  JOIN pg_attribute a ON a.attrelid = to_regclass(c.t)
                   AND a.attname = c.name AND NOT a.attisdropped)
                  = cardinality($3::text[]) AS columns,
                (SELECT coalesce(bool_and(to_regclass(t) IS NOT NULL), true)
                  FROM unnest($5::text[]) AS t) AS tables
         FROM unnest($2::text[]) AS f`,
        values: [
          table,
          functions,
          columns.map(([name]) => name),
          columns.map(([, column]) => column),
          tables,
        ],
      });
      return rows[0];
    } catch (error) {
      if (!isConnectionFailure(error)) {
        throw error;
      }
      const failure = [sqlState(error), messageOf(error)]
        .filter(Boolean)
        .join(' ');
      if (attempt >= attempts) {
        logger.error(
          `The start-up check of the database lost its connection (${failure}) ${attempts} times: giving up (the connection's startupRetry; on TypeORM, the module's retryAttempts)`,
        );
        throw error;
      }
      const delayMs = Math.min(maxDelayMs, FIRST_DELAY_MS * 2 ** (attempt - 1));
      logger.warn(
        `The start-up check of the database lost its connection (${failure}): retrying in ${delayMs} ms (attempt ${attempt + 1} of ${attempts})`,
      );
      await sleep(delayMs);
    }
  }
}
