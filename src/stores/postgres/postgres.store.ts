import {
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import type { ResolvedIdempotencyOptions } from '../../idempotency.options.js';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import { IdempotencyStepTooLargeError } from '../../exceptions/idempotency-step-too-large.error.js';
import type {
  PostgresClient,
  PostgresConnection,
  PostgresDataAccess,
  PostgresTransaction,
} from '../../interfaces/postgres-adapter.interface.js';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../../idempotency.constants.js';
import type {
  AbandonedKey,
  ClaimOutcome,
  ClaimRequest,
  Completion,
  FailureKey,
  FencedWrite,
  ForgottenBatch,
  IdempotencyStore,
  Lease,
  RecordInspection,
  RecordPage,
  RecordQuery,
  Renewal,
  ResetOutcome,
  StepLease,
  StoredResponse,
} from '../../interfaces/idempotency-store.interface.js';
import {
  TransactionEndedError,
  TransactionLostError,
} from '../../core/transaction.errors.js';
import { sqlState } from '../../core/failures.js';
import { messageOf } from '../../core/error-message.js';
import {
  forgetPostgresRecords,
  readPostgresStepResults,
  replacePostgresResponse,
  replacePostgresStepResult,
  inspectPostgresRecord,
  listPostgresRecords,
  resetPostgresRecord,
} from './postgres-admin.js';
import { claimPostgresKey } from './postgres-claim.js';
import { collectExpired } from './postgres-collection.js';
import {
  COMPLETION_CHANNEL,
  PRESENCE_APPLICATION_NAME,
  PostgresPresence,
} from './postgres-presence.js';
import { readPostgresSchema } from './postgres-schema-check.js';
import { stepJson, stepResult } from './postgres-step-result.js';
import {
  BIND,
  COMPLETE_ALONE,
  COUNT_FAILURE,
  FORGET_FAILURES,
  completeStatements,
  PostgresStatements,
  READ_MARK,
  READ_STEP,
  RELEASE,
  RENEW,
  SAVE_STEP,
} from './postgres-statements.js';

const logger = new Logger('Idempotency');
const TABLE = `"${IDEMPOTENCY_TABLE_NAME}"`;
const STEPS = `"${IDEMPOTENCY_STEPS_TABLE_NAME}"`;
/**
 * The functions the store calls, of migrations LeaseIdempotencyClaims1764000000003
 * and KeepIdempotencyGenerations1764000000005.
 */
export const POSTGRES_FUNCTIONS = [
  'idempotency_acquire_generation(text,text,text,text,text,uuid,uuid,float8,float8,boolean)',
  'idempotency_release(text,text,uuid,boolean)',
  'idempotency_renew(text[],text[],uuid[],float8[])',
  'idempotency_save_step(text,text,uuid,text,jsonb,float8)',
];
/** The columns of migration BindIdempotencySteps1764000000004. */
const POSTGRES_COLUMNS = [
  [TABLE, 'has_steps'],
  [STEPS, 'fingerprint'],
] as const;
/** The table of migration CountIdempotencyFailures1764000000006. */
const FAILURES = '"idempotency_failures"';
/** SQLSTATE of a table that does not exist. */
const UNDEFINED_TABLE = '42P01';
/**
 * SQLSTATE of a value over one of PostgreSQL's limits: a `jsonb` too large,
 * but also an index row too large (a step's name that, with its scope and
 * key, the steps' primary key cannot hold).
 */
const PROGRAM_LIMIT_EXCEEDED = '54000';
/** The most a `jsonb` string, array or object holds: 256 MiB less a byte. */
const JSONB_LIMIT_BYTES = 268_435_455;
/**
 * How many times the bytes of its JSON text a `jsonb` value takes at most
 * (a digit takes 12 bytes with its entry, `0,` two): a result whose text is
 * smaller than the limit divided by this never reaches `jsonb`'s limits.
 */
const JSONB_MAX_GROWTH = 8;
/** Longest NOTIFY payload PostgreSQL takes is 8000 bytes. */
const MAX_PAYLOAD_BYTES = 7_900;

/** The NOTIFY payload that names a key. */
export function completionPayload(scope: string, key: string): string {
  return `${scope}\u001f${key}`;
}

/**
 * @internal The claim protocol on PostgreSQL: every statement is one call of a
 * function of the shipped migrations, sent on the application's pool (or, for
 * a completion, on the connection of the handler's transaction) through the
 * data library's adapter, whose transactions handlers run in. Claims,
 * releases and renewals commit without waiting for the WAL flush;
 * completions and steps commit durably.
 */
export class PostgresIdempotencyStore
  implements
    IdempotencyStore<PostgresTransaction>,
    OnModuleInit,
    OnApplicationBootstrap,
    OnApplicationShutdown
{
  readonly completesInTransaction = true;
  private presence: PostgresPresence | undefined;
  private readonly watchers: Array<(scope?: string, key?: string) => void> = [];
  private readonly statements = new PostgresStatements();
  /** In the schema of the record table, once {@link onModuleInit} found it. */
  private inTransaction = completeStatements();

  constructor(
    /** The data library it completes in: the handlers' transactions. */
    readonly transactions: PostgresDataAccess,
    private readonly options: Pick<ResolvedIdempotencyOptions, 'presence'>,
  ) {}

  private get pool(): PostgresConnection {
    return this.transactions.connection;
  }

  /**
   * Refuses a database without the table or the functions of the migrations.
   * A connection lost during the check is retried (see {@link readPostgresSchema}).
   */
  async onModuleInit(): Promise<void> {
    const { ready, schema, functions, columns, tables } =
      await readPostgresSchema(
        this.pool,
        TABLE,
        POSTGRES_FUNCTIONS,
        POSTGRES_COLUMNS,
        [FAILURES],
      );
    const missing = !ready
      ? `The table ${TABLE} does not exist`
      : !functions
        ? `The functions of migrations LeaseIdempotencyClaims1764000000003 and KeepIdempotencyGenerations1764000000005 do not exist`
        : !columns
          ? `The columns of migration BindIdempotencySteps1764000000004 do not exist`
          : !tables
            ? `The table ${FAILURES} of migration CountIdempotencyFailures1764000000006 does not exist`
            : undefined;
    if (missing) {
      const { where, how } = this.transactions.schemaHelp;
      throw new IdempotencyConfigurationError(`${missing} in ${where}.`, how);
    }
    this.inTransaction = completeStatements(schema);
    const presence = this.transactions.presence ?? this.options.presence;
    if (presence && !this.presence) {
      const pool = this.pool;
      const url = typeof presence === 'object' ? presence.url : undefined;
      this.presence = new PostgresPresence(() =>
        pool.session({ url, applicationName: PRESENCE_APPLICATION_NAME }),
      );
      this.presence.onNotification((payload) => {
        const at = payload?.indexOf('\u001f');
        for (const watcher of this.watchers) {
          if (payload === undefined) {
            // The session dropped or came back: notifications were missed.
            watcher();
          } else if (at !== undefined && at >= 0) {
            watcher(payload.slice(0, at), payload.slice(at + 1));
          }
        }
      });
    }
  }

  /** Opens the presence session (a failure is logged and retried). */
  async onApplicationBootstrap(): Promise<void> {
    await this.presence?.start();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.presence?.stop();
  }

  get watching(): boolean {
    return this.presence?.listening ?? false;
  }

  watch(listener: (scope?: string, key?: string) => void): void {
    this.watchers.push(listener);
  }

  async claim(request: ClaimRequest): Promise<ClaimOutcome> {
    return claimPostgresKey(
      this.statements,
      this.pool,
      this.presence?.heldInstance ?? null,
      request,
      this.presence?.instance ?? null,
    );
  }

  async renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    if (leases.length === 0) {
      return new Set();
    }
    const { rows } = await this.statements.query<{ owner: string }>(
      this.pool,
      RENEW,
      [
        leases.map((lease) => lease.scope),
        leases.map((lease) => lease.key),
        leases.map((lease) => lease.owner),
        leases.map((lease) => lease.durationMs),
      ],
    );
    return new Set(rows.map((row) => row.owner));
  }

  async complete(
    lease: Lease,
    completion: Completion,
    transaction: PostgresTransaction | undefined,
  ): Promise<FencedWrite> {
    const { response } = completion;
    const stored = 'body' in response ? response : undefined;
    const values = [
      lease.scope,
      lease.key,
      lease.owner,
      completion.status,
      response.status,
      stored ? JSON.stringify(stored.headers) : null,
      stored?.body ?? null,
      completion.ttlMs,
    ];
    // Without a transaction of the handler, the statement is one of its own.
    // Once one began, the completion goes in it or nowhere: on another
    // connection, the record would commit without the handler's writes.
    const connection = transaction?.began ? transaction.client : this.pool;
    if (!connection) {
      throw transaction?.failure ?? new TransactionLostError();
    }
    const inTransaction = connection !== this.pool;
    const mark = inTransaction ? (transaction?.mark ?? null) : undefined;
    const { rows } = await this.statements.query<{
      waiting: boolean;
      has_steps: boolean;
    }>(
      connection,
      inTransaction ? this.inTransaction.complete : COMPLETE_ALONE,
      inTransaction ? [...values, mark] : values,
      inTransaction,
    );
    if (rows.length === 0 && mark) {
      await this.refuseChained(connection, mark);
    }
    if (rows[0]?.has_steps) {
      await this.statements.query(
        connection,
        this.inTransaction.deleteSteps,
        [lease.scope, lease.key],
        inTransaction,
      );
    }
    // No row: the claim is no longer this owner's.
    return { fenced: rows.length === 1, waiting: rows[0]?.waiting ?? false };
  }

  /**
   * @throws TransactionEndedError when the session's transaction is not the
   * one the module began and marked `mark`: an end sent by hand chained
   * another one to it (`COMMIT AND CHAIN`, `ROLLBACK AND CHAIN`, `COMMIT;
   * BEGIN`), so what the handler wrote before it committed or was undone
   * without the record.
   */
  private async refuseChained(
    connection: PostgresClient,
    mark: string,
  ): Promise<void> {
    const { rows } = await this.statements.query<{ mark: string | null }>(
      connection,
      READ_MARK,
      [],
      true,
    );
    if (rows[0]?.mark !== mark) {
      const ended = new TransactionEndedError();
      logger.warn(ended.message);
      throw ended;
    }
  }

  async release(lease: Lease, bind = false): Promise<FencedWrite> {
    const { rows } = await this.statements.query<{
      released: boolean;
      waiting: boolean;
    }>(this.pool, RELEASE, [lease.scope, lease.key, lease.owner, bind]);
    return { fenced: rows[0].released, waiting: rows[0].waiting };
  }

  async bind(lease: StepLease, holdMs?: number): Promise<boolean> {
    const { rowCount } = await this.statements.query(this.pool, BIND, [
      lease.scope,
      lease.key,
      lease.owner,
      holdMs ?? null,
    ]);
    return rowCount === 1;
  }

  async notify(leases: readonly Lease[]): Promise<void> {
    const payloads = leases
      .map((lease) => completionPayload(lease.scope, lease.key))
      // Too long to notify: the waiter finds the record when it polls.
      .filter((payload) => Buffer.byteLength(payload) <= MAX_PAYLOAD_BYTES);
    if (payloads.length > 0) {
      await this.pool.query({
        text: `SELECT pg_notify('${COMPLETION_CHANNEL}', payload) FROM unnest($1::text[]) AS payload`,
        values: [payloads],
      });
    }
  }

  async readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ result: unknown } | undefined> {
    // A step of the previous version has no fingerprint: any request of its
    // key reads it, as it did.
    const { rows } = await this.statements.query<{ result: unknown }>(
      this.pool,
      READ_STEP,
      [lease.scope, lease.key, step, lease.fingerprint, lease.owner],
    );
    return rows[0] && { result: stepResult(rows[0].result) };
  }

  async saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    const json = stepJson(result);
    try {
      const { rows } = await this.statements.query<{ saved: boolean }>(
        this.pool,
        SAVE_STEP,
        [lease.scope, lease.key, lease.owner, step, json, ttlMs],
      );
      return rows[0].saved;
    } catch (error) {
      // `jsonb` holds no string, array or object over its limit, whatever
      // the retry: refused before anything was written. The same SQLSTATE
      // for a small result is another limit (an index row too large): not
      // the result's size, which a 500 would answer for ever.
      const bytes = Buffer.byteLength(json);
      if (
        sqlState(error) === PROGRAM_LIMIT_EXCEEDED &&
        bytes * JSONB_MAX_GROWTH > JSONB_LIMIT_BYTES
      ) {
        throw new IdempotencyStepTooLargeError(
          step,
          bytes,
          JSONB_LIMIT_BYTES,
          `PostgreSQL's jsonb refused it (${messageOf(error)})`,
        );
      }
      throw error;
    }
  }

  /**
   * Counts in the table of migration CountIdempotencyFailures1764000000006,
   * in a statement of its own (the handler's transaction rolled back).
   * @throws IdempotencyConfigurationError when that migration has not run.
   */
  async countFailure(key: FailureKey, ttlMs: number): Promise<number> {
    try {
      const { rows } = await this.statements.query<{ failures: number }>(
        this.pool,
        COUNT_FAILURE,
        [key.scope, key.key, ttlMs],
      );
      return rows[0].failures;
    } catch (error) {
      if (sqlState(error) === UNDEFINED_TABLE) {
        const { where, how } = this.transactions.schemaHelp;
        throw new IdempotencyConfigurationError(
          `The table ${FAILURES} of migration CountIdempotencyFailures1764000000006, which \`maxAttempts\` counts in, does not exist in ${where}.`,
          how,
        );
      }
      throw error;
    }
  }

  /** Deletes the key's count, in a statement of its own. */
  async forgetFailures(key: FailureKey): Promise<void> {
    await this.statements.query(this.pool, FORGET_FAILURES, [
      key.scope,
      key.key,
    ]);
  }

  collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ removed: number; more: boolean }> {
    return collectExpired(this.pool, batchSize, abandoned);
  }

  inspectRecord(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined> {
    return inspectPostgresRecord(this.pool, scope, key, withBody);
  }

  listRecords(query: RecordQuery): Promise<RecordPage> {
    return listPostgresRecords(this.pool, query);
  }

  resetRecord(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome> {
    return resetPostgresRecord(this.pool, scope, key, force);
  }

  forgetRecords(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    return forgetPostgresRecords(this.pool, scope, key, batchSize);
  }

  replaceResponse(
    scope: string,
    key: string,
    expected: Buffer,
    response: StoredResponse,
    generation?: string,
  ): Promise<boolean> {
    return replacePostgresResponse(
      this.pool,
      scope,
      key,
      expected,
      response,
      generation,
    );
  }

  readStepResults(
    scope: string,
    key: string,
  ): Promise<Array<{ step: string; result: unknown }>> {
    return readPostgresStepResults(this.pool, scope, key);
  }

  replaceStepResult(
    scope: string,
    key: string,
    step: string,
    expected: unknown,
    result: unknown,
  ): Promise<boolean> {
    return replacePostgresStepResult(
      this.pool,
      scope,
      key,
      step,
      expected,
      result,
    );
  }
}
