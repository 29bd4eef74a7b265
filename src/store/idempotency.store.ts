import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import { DataSource, type QueryRunner } from 'typeorm';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../idempotency.constants.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import {
  bindAmbientTransaction,
  endAmbientTransaction,
} from './ambient-transaction.js';
import { assertPostgresDataSource } from './postgres-data-source.js';

/** @internal A response as stored and replayed. */
export interface StoredResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * @internal Final state of a record: `completed` (a success), `failed` (an
 * error stored by the error policy), `not_replayable` (a response that could
 * not be stored: a stream, or a body over the size limit).
 */
export type RecordStatus = 'completed' | 'failed' | 'not_replayable';

/** @internal A finished record, as read back. */
export interface StoredRecord {
  readonly status: RecordStatus;
  readonly fingerprint: string;
  readonly response: StoredResponse;
}

/** @internal What identifies a request. */
export interface RequestIdentity {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  readonly method: string;
  readonly path: string;
}

/**
 * @internal Outcome of a claim:
 * - `claimed`: this transaction owns the key; run the handler.
 * - `finished`: a finished record exists; replay it (or refuse it).
 * - `busy`: the same request (same fingerprint) is executing.
 * - `mismatch`: a different request (another fingerprint) is executing.
 */
export type ClaimResult =
  | { readonly state: 'claimed' }
  | { readonly state: 'finished'; readonly record: StoredRecord }
  | { readonly state: 'busy' }
  | { readonly state: 'mismatch' };

interface RecordRow {
  status: RecordStatus;
  fingerprint: string;
  response_status: number;
  response_headers: Record<string, string | string[]>;
  response_body: Buffer;
}

interface ClaimRow extends Partial<RecordRow> {
  fingerprint_locked: boolean;
  locked: boolean;
}

const TABLE = `"${IDEMPOTENCY_TABLE_NAME}"`;
const STEPS = `"${IDEMPOTENCY_STEPS_TABLE_NAME}"`;
/** Advisory lock of (scope, key): held by the transaction executing the key. */
const LOCK_ID = `hashtextextended($1 || chr(31) || $2, 0)`;
/**
 * Advisory lock of (scope, key, fingerprint), taken just before the key's
 * lock. A duplicate that cannot take the key's lock tells from this one
 * whether the request executing has its fingerprint (409) or another (422).
 */
const FINGERPRINT_LOCK_ID = `hashtextextended($1 || chr(31) || $2 || chr(31) || $3, 0)`;
const RECORD_COLUMNS = `status, fingerprint, response_status, response_headers, response_body`;
/** The functions of migration CreateIdempotencyFunctions1764000000002. */
const CLAIM_FUNCTION = 'idempotency_claim(text,text,text,text)';
const COMPLETE_FUNCTION =
  'idempotency_complete(text,text,text,text,text,text,integer,jsonb,bytea,float8)';
const FINISHED = `status <> 'in_progress'`;
/**
 * How long a request waits for a key held under another fingerprint before it
 * concludes that a different request is executing (422).
 */
const MISMATCH_CONFIRMATION_MS = 100;
/** SQLSTATE of `lock_timeout` expiring. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * @internal All SQL of the module. Every statement runs on the query runner of
 * the request's transaction, borrowed from the application's DataSource.
 */
@Injectable()
export class IdempotencyStore implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('Idempotency');
  private dataSource!: DataSource;
  private unbind?: () => void;
  /** Statements that depend on the server version, built once. */
  private boundSql = '';
  /**
   * How many transactions of the module may be open at once: one fewer than
   * the pool's connections. A handler holds its connection while a step
   * borrows a second one to commit; were every connection held by a handler,
   * every step would wait for a connection that only a step can free.
   */
  private capacity = Infinity;
  private opened = 0;
  /** Transactions waiting for one of the others to end (see begin()). */
  private readonly queued: Array<() => void> = [];
  /** Query runners opened by `begin()` and not released yet. */
  private readonly counted = new WeakSet<QueryRunner>();

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  async onModuleInit(): Promise<void> {
    const token = getDataSourceToken(this.options.dataSource);
    let dataSource: DataSource | undefined;
    try {
      dataSource = this.moduleRef.get<DataSource>(token, { strict: false });
    } catch {
      dataSource = undefined;
    }
    if (!(dataSource instanceof DataSource)) {
      throw new IdempotencyConfigurationError(
        `IdempotencyModule found no TypeORM DataSource${this.options.dataSource ? ` named "${this.options.dataSource}"` : ''}.`,
        'Import TypeOrmModule.forRoot() (or forRootAsync()) in the application module.',
        'Pass `dataSource: <name>` to IdempotencyModule if the DataSource has a name.',
      );
    }
    assertPostgresDataSource(dataSource);
    this.dataSource = dataSource;
    const poolSize = (
      dataSource.driver as { master?: { options?: { max?: unknown } } }
    ).master?.options?.max;
    if (typeof poolSize === 'number' && poolSize > 1) {
      this.capacity = poolSize - 1;
    }
    const [{ version, ready, functions }] = (await dataSource.query(
      `SELECT current_setting('server_version_num')::int AS version,
              to_regclass($1) IS NOT NULL AS ready,
              to_regprocedure($2) IS NOT NULL AND to_regprocedure($3) IS NOT NULL AS functions`,
      [TABLE, CLAIM_FUNCTION, COMPLETE_FUNCTION],
    )) as Array<{ version: number; ready: boolean; functions: boolean }>;
    const missing = !ready
      ? `The table ${TABLE} does not exist`
      : !functions
        ? `The functions ${CLAIM_FUNCTION} and ${COMPLETE_FUNCTION} do not exist`
        : undefined;
    if (missing) {
      throw new IdempotencyConfigurationError(
        `${missing} in the database of the DataSource.`,
        'Add `...idempotencyMigrations` to the DataSource `migrations` and run them (TypeORM CLI `migration:run`, or `migrationsRun: true`).',
      );
    }
    // PostgreSQL 17 bounds a whole transaction; older servers bound each
    // statement and each idle moment inside it.
    const settings = [
      'statement_timeout',
      'idle_in_transaction_session_timeout',
    ];
    if (version >= 170000) {
      settings.push('transaction_timeout');
    }
    this.boundSql = `SELECT ${settings
      .map((name) => `set_config('${name}', $1, true)`)
      .join(', ')}`;
    this.unbind = bindAmbientTransaction(dataSource);
  }

  onApplicationShutdown(): void {
    this.unbind?.();
    this.unbind = undefined;
  }

  /** The DataSource whose connections the module borrows. */
  get source(): DataSource {
    return this.dataSource;
  }

  /**
   * Opens a transaction on a connection borrowed from the pool, once fewer
   * than `capacity` transactions of the module are open.
   * @param waitMs how long to wait for one of the others to end (the
   * request's `transactionTimeout`: PostgreSQL ends each of them by then,
   * unless they are out of its reach, the server gone).
   * @throws Error when none ended within `waitMs`.
   */
  async begin(waitMs: number): Promise<QueryRunner> {
    if (this.opened < this.capacity) {
      this.opened += 1;
    } else {
      // The transaction that ends hands its place over (see release()).
      await new Promise<void>((resolve, reject) => {
        const waiter = () => {
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          this.queued.splice(this.queued.indexOf(waiter), 1);
          reject(
            new Error(
              `No transaction of the module ended within ${waitMs} ms (${this.capacity} open)`,
            ),
          );
        }, waitMs).unref();
        this.queued.push(waiter);
      });
    }
    const queryRunner = this.dataSource.createQueryRunner();
    this.counted.add(queryRunner);
    try {
      await queryRunner.startTransaction();
    } catch (error) {
      await this.release(queryRunner);
      throw error;
    }
    return queryRunner;
  }

  /** Bounds a transaction without a key (keyless requests). */
  async bound(queryRunner: QueryRunner, timeoutMs: number): Promise<void> {
    await queryRunner.query(this.boundSql, [String(timeoutMs)]);
  }

  /**
   * One statement (the function `idempotency_claim`): bounds the transaction,
   * tries the advisory locks of the request's fingerprint and of its key, and
   * reads the key's finished record. The key is claimed when its lock is held
   * and no unexpired record exists; nothing is written until `complete()`.
   */
  async claim(
    queryRunner: QueryRunner,
    id: RequestIdentity,
    timeoutMs: number,
  ): Promise<ClaimResult> {
    const [row] = (await queryRunner.query(
      `SELECT * FROM idempotency_claim($1, $2, $3, $4)`,
      [id.scope, id.key, id.fingerprint, String(timeoutMs)],
    )) as ClaimRow[];
    if (row.status) {
      return { state: 'finished', record: toRecord(row as RecordRow) };
    }
    if (row.locked) {
      return { state: 'claimed' };
    }
    if (!row.fingerprint_locked) {
      // Someone holds this very fingerprint: the same request is executing.
      return { state: 'busy' };
    }
    // Either the key's holder has another fingerprint, or it committed its
    // record after the function read: a new statement tells.
    const record = await this.read(queryRunner, id);
    if (record) {
      return { state: 'finished', record };
    }
    // The key's holder has another fingerprint, unless it is just ending and
    // releasing its locks: a short wait for the key tells the two apart.
    if (await this.waitForLock(queryRunner, id, MISMATCH_CONFIRMATION_MS)) {
      return this.claim(queryRunner, id, timeoutMs);
    }
    return { state: 'mismatch' };
  }

  /**
   * Waits at most `waitMs` for the advisory locks of the key and of the
   * request's fingerprint.
   * @returns false when the wait timed out (the transaction is then aborted).
   */
  async waitForLock(
    queryRunner: QueryRunner,
    id: RequestIdentity,
    waitMs: number,
  ): Promise<boolean> {
    try {
      await queryRunner.query(
        // Innermost first: keep the session's lock_timeout, bound the wait,
        // take the key's lock, then this fingerprint's (its holder may still
        // be releasing it), then restore lock_timeout for the handler that
        // may run next.
        `SELECT set_config('lock_timeout', fingerprinted.previous, true) FROM (
           SELECT locked.previous, pg_advisory_xact_lock(${FINGERPRINT_LOCK_ID}) FROM (
             SELECT bounded.previous, pg_advisory_xact_lock(${LOCK_ID}) FROM (
               SELECT kept.previous, set_config('lock_timeout', $4, true) FROM (
                 SELECT current_setting('lock_timeout') AS previous OFFSET 0
               ) kept OFFSET 0
             ) bounded OFFSET 0
           ) locked OFFSET 0
         ) fingerprinted`,
        [id.scope, id.key, id.fingerprint, String(waitMs)],
      );
      return true;
    } catch (error) {
      if (
        (error as { driverError?: { code?: string } }).driverError?.code ===
        LOCK_NOT_AVAILABLE
      ) {
        return false;
      }
      throw error;
    }
  }

  /** Reads the completed, unexpired record of a key. */
  async read(
    queryRunner: QueryRunner,
    id: RequestIdentity,
  ): Promise<StoredRecord | undefined> {
    const rows = (await queryRunner.query(
      `SELECT ${RECORD_COLUMNS} FROM ${TABLE}
       WHERE scope = $1 AND key = $2 AND ${FINISHED} AND expires_at > now()`,
      [id.scope, id.key],
    )) as RecordRow[];
    return rows.length > 0 ? toRecord(rows[0]) : undefined;
  }

  /**
   * Writes the record of the claimed key with the response sent to the
   * client (its status only, for a response that is not replayable), and
   * clears the key's recovery points: one statement (the function
   * `idempotency_complete`), in the request's transaction.
   */
  async complete(
    queryRunner: QueryRunner,
    id: RequestIdentity,
    status: RecordStatus,
    response: StoredResponse | { readonly status: number },
    ttlMs: number,
  ): Promise<void> {
    const stored = 'body' in response ? response : undefined;
    await queryRunner.query(
      `SELECT idempotency_complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
      [
        id.scope,
        id.key,
        id.fingerprint,
        id.method,
        id.path,
        status,
        response.status,
        stored ? JSON.stringify(stored.headers) : null,
        stored?.body ?? null,
        ttlMs,
      ],
    );
  }

  /**
   * Stores an error response in a transaction of its own (one statement), once
   * the handler's transaction has rolled back. Skipped when another request
   * already holds the key again, or a record exists.
   */
  async storeError(
    id: RequestIdentity,
    response: StoredResponse,
    ttlMs: number,
  ): Promise<void> {
    const queryRunner = this.dataSource.createQueryRunner();
    try {
      await queryRunner.query(
        `WITH locked AS (SELECT pg_try_advisory_xact_lock(${LOCK_ID}) AS locked),
         cleared AS (
           DELETE FROM ${STEPS} WHERE scope = $1 AND key = $2 AND (SELECT locked FROM locked)
         )
         INSERT INTO ${TABLE} AS r (scope, key, fingerprint, method, path, status,
           response_status, response_headers, response_body, completed_at, expires_at)
         SELECT $1, $2, $3, $4, $5, 'failed', $6, $7, $8, now(),
           now() + $9::float8 * interval '1 millisecond'
         FROM locked WHERE locked
         ON CONFLICT (scope, key) DO UPDATE SET
           fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
           status = 'failed', response_status = EXCLUDED.response_status,
           response_headers = EXCLUDED.response_headers, response_body = EXCLUDED.response_body,
           created_at = now(), completed_at = now(), expires_at = EXCLUDED.expires_at
         WHERE r.expires_at <= now()`,
        [
          id.scope,
          id.key,
          id.fingerprint,
          id.method,
          id.path,
          response.status,
          JSON.stringify(response.headers),
          response.body,
          ttlMs,
        ],
      );
    } finally {
      await this.release(queryRunner);
    }
  }

  /** The stored result of a completed step of a key, if any. */
  async readStep(
    queryRunner: QueryRunner,
    scope: string,
    key: string,
    step: string,
  ): Promise<{ result: unknown } | undefined> {
    const rows = (await queryRunner.query(
      `SELECT result FROM ${STEPS}
       WHERE scope = $1 AND key = $2 AND step = $3 AND expires_at > now()`,
      [scope, key, step],
    )) as Array<{ result: unknown }>;
    return rows[0];
  }

  /**
   * Commits the result of a completed step at once, on a connection of its
   * own: it survives the rollback or the loss of the request's transaction.
   */
  async saveStep(
    scope: string,
    key: string,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<void> {
    const queryRunner = this.dataSource.createQueryRunner();
    try {
      await queryRunner.query(
        `INSERT INTO ${STEPS} (scope, key, step, result, expires_at)
         VALUES ($1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond')
         ON CONFLICT (scope, key, step) DO UPDATE SET
           result = EXCLUDED.result, created_at = now(), expires_at = EXCLUDED.expires_at`,
        [scope, key, step, JSON.stringify(result ?? null), ttlMs],
      );
    } finally {
      await this.release(queryRunner);
    }
  }

  /** Commits and gives the connection back to the pool. */
  async commit(queryRunner: QueryRunner): Promise<void> {
    try {
      await queryRunner.commitTransaction();
    } finally {
      await this.release(queryRunner);
    }
  }

  /**
   * Rolls back and gives the connection back to the pool. Never throws: a
   * connection that broke has rolled back on the server already.
   * @returns false when the rollback failed: the transaction was lost.
   */
  async rollback(queryRunner: QueryRunner): Promise<boolean> {
    try {
      // Released already, its transaction has ended: by commit() (whatever
      // COMMIT said), or by TypeORM when its connection broke while idle (a
      // handler waiting on something else). release() still runs: the
      // transaction's place goes to the next one, and its ambient
      // transaction ends.
      if (!queryRunner.isReleased && queryRunner.isTransactionActive) {
        await queryRunner.rollbackTransaction();
      }
      return true;
    } catch (error) {
      this.logger.warn(`Rollback failed: ${(error as Error).message}`);
      return false;
    } finally {
      await this.release(queryRunner);
    }
  }

  private async release(queryRunner: QueryRunner): Promise<void> {
    endAmbientTransaction(queryRunner);
    if (!queryRunner.isReleased) {
      await queryRunner.release().catch((error: unknown) => {
        this.logger.warn(
          `Releasing a connection failed: ${(error as Error).message}`,
        );
      });
    }
    if (this.counted.delete(queryRunner)) {
      const next = this.queued.shift();
      if (next) {
        next();
      } else {
        this.opened -= 1;
      }
    }
  }
}

function toRecord(row: RecordRow): StoredRecord {
  return {
    status: row.status,
    fingerprint: row.fingerprint,
    response: {
      status: row.response_status,
      headers: row.response_headers,
      body: row.response_body,
    },
  };
}
