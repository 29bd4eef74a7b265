import { sqlState } from '../../core/failures.js';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../../idempotency.constants.js';
import type {
  ForgottenBatch,
  RecordInspection,
  RecordPage,
  RecordQuery,
  RecordState,
  RecordSummary,
  ResetOutcome,
  StoredResponse,
} from '../../interfaces/idempotency-store.interface.js';
import type {
  PostgresClient,
  PostgresConnection,
} from '../../interfaces/postgres-adapter.interface.js';
import { decodeCursor, encodeCursor } from '../record-cursor.js';
import { stepJson, stepResult } from './postgres-step-result.js';

const TABLE = `"${IDEMPOTENCY_TABLE_NAME}"`;
const STEPS = `"${IDEMPOTENCY_STEPS_TABLE_NAME}"`;

interface SummaryRow {
  scope: string;
  key: string;
  status: RecordState;
  fingerprint: string;
  method: string;
  path: string;
  owner: string | null;
  lease_expires_at: Date | null;
  generation: string;
  has_steps: boolean;
  created_at: Date;
  completed_at: Date | null;
  expires_at: Date;
}

interface InspectionRow extends SummaryRow {
  response_status: number | null;
  response_headers: Record<string, string | string[]> | null;
  response_body?: Buffer | null;
}

/** The generation as the claim returns it (its `created_at`, in µs). */
const SUMMARY_COLUMNS = `scope, key, status, fingerprint, method, path, owner,
  lease_expires_at, (extract(epoch FROM created_at) * 1000000)::bigint::text AS generation,
  has_steps, created_at, completed_at, expires_at`;

function summaryOf(row: SummaryRow): RecordSummary {
  // A finished record keeps its last owner and lease in the row: not shown.
  const claim = row.status === 'in_progress';
  return {
    scope: row.scope,
    key: row.key,
    status: row.status,
    fingerprint: row.fingerprint,
    method: row.method,
    path: row.path,
    owner: (claim && row.owner) || undefined,
    leaseExpiresAt: (claim && row.lease_expires_at) || undefined,
    generation: row.generation,
    // A finished record is replayed: no request is bound to run it.
    bound: claim && row.has_steps,
    createdAt: row.created_at,
    completedAt: row.completed_at ?? undefined,
    expiresAt: row.expires_at,
  };
}

/** @internal A record and its steps, for `IdempotencyStore.inspectRecord`. */
export async function inspectPostgresRecord(
  connection: PostgresClient,
  scope: string,
  key: string,
  withBody: boolean,
): Promise<RecordInspection | undefined> {
  const { rows } = await connection.query<InspectionRow>({
    text: `SELECT ${SUMMARY_COLUMNS}, response_status, response_headers
             ${withBody ? ', response_body' : ''}
           FROM ${TABLE} WHERE scope = $1 AND key = $2`,
    values: [scope, key],
  });
  const row = rows[0];
  if (!row) {
    return undefined;
  }
  const steps = await connection.query<{
    step: string;
    created_at: Date;
    expires_at: Date;
  }>({
    text: `SELECT step, created_at, expires_at FROM ${STEPS}
           WHERE scope = $1 AND key = $2 ORDER BY created_at, step`,
    values: [scope, key],
  });
  return {
    ...summaryOf(row),
    response:
      row.response_status === null
        ? undefined
        : {
            status: row.response_status,
            headers: row.response_headers ?? {},
            ...(withBody ? { body: row.response_body ?? Buffer.alloc(0) } : {}),
          },
    steps: steps.rows.map((step) => ({
      step: step.step,
      createdAt: step.created_at,
      expiresAt: step.expires_at,
    })),
  };
}

/**
 * @internal A page of records in (scope, key) order, through the primary
 * key, for `IdempotencyStore.listRecords`.
 */
export async function listPostgresRecords(
  connection: PostgresClient,
  query: RecordQuery,
): Promise<RecordPage> {
  const after = query.cursor === undefined ? [] : decodeCursor(query.cursor, 2);
  const { rows } = await connection.query<SummaryRow>({
    text: `SELECT ${SUMMARY_COLUMNS} FROM ${TABLE}
           WHERE status = ANY($1::text[])
             AND ($2::text IS NULL OR scope = $2)
             AND ($3::timestamptz IS NULL OR created_at < $3)
             AND ($4::text IS NULL OR (scope, key) > ($4, $5::text))
           ORDER BY scope, key LIMIT $6`,
    values: [
      query.statuses,
      query.scope ?? null,
      query.olderThan ?? null,
      after[0] ?? null,
      after[1] ?? null,
      query.limit,
    ],
  });
  const last = rows.at(-1);
  return {
    records: rows.map(summaryOf),
    cursor:
      last && rows.length === query.limit
        ? encodeCursor([last.scope, last.key])
        : undefined,
  };
}

/**
 * @internal Ends a record, in a short transaction of its own, for
 * `IdempotencyStore.resetRecord`: a claim bound to its request, or held by
 * an owner (which may have derived keys from its generation), loses its
 * owner and lease as a takeover finds it, keeping its generation and steps
 * (a bound one stays bound); any other record is deleted with its steps. Either way the owner's fenced writes find no row of theirs.
 */
export function resetPostgresRecord(
  connection: PostgresConnection,
  scope: string,
  key: string,
  force: boolean,
): Promise<ResetOutcome> {
  return connection.transaction(async (client) => {
    const { rows } = await client.query<{
      status: RecordState;
      owner: string | null;
      has_steps: boolean;
      lease_ms: number;
    }>({
      text: `SELECT status, owner, has_steps,
               greatest(0, extract(epoch FROM lease_expires_at - now()) * 1000)::float8 AS lease_ms
             FROM ${TABLE} WHERE scope = $1 AND key = $2 FOR UPDATE`,
      values: [scope, key],
    });
    const row = rows[0];
    if (!row) {
      return { state: 'absent' };
    }
    const claimed = row.status === 'in_progress' && row.owner !== null;
    if (claimed && row.lease_ms > 0 && !force) {
      return { state: 'held', owner: row.owner!, leaseMs: row.lease_ms };
    }
    // A claim, bound or held (its attempt may have sent keys derived from
    // its generation downstream), keeps its generation, as a takeover does.
    if (row.status === 'in_progress' && (row.has_steps || claimed)) {
      await client.query({
        text: `UPDATE ${TABLE} SET owner = NULL, owner_instance = NULL,
                 lease_expires_at = now()
               WHERE scope = $1 AND key = $2`,
        values: [scope, key],
      });
    } else {
      for (const table of [TABLE, STEPS]) {
        await client.query({
          text: `DELETE FROM ${table} WHERE scope = $1 AND key = $2`,
          values: [scope, key],
        });
      }
    }
    return { state: 'reset', fenced: claimed };
  });
}

/**
 * Deletes at most `limit` rows of `table`, named by `columns`, in one
 * statement; only those that also meet `condition` (SQL on `table`'s row,
 * `x`), if given.
 */
async function deleteBatch(
  connection: PostgresClient,
  [table, columns, condition]: readonly [string, string, string?],
  scope: string,
  key: string | undefined,
  limit: number,
): Promise<number> {
  const { rows } = await connection.query<{ deleted: number }>({
    text: `WITH doomed AS (
             SELECT ${columns} FROM ${table} x
             WHERE scope = $1 AND ($2::text IS NULL OR key = $2)
               ${condition ? `AND ${condition}` : ''}
             LIMIT $3 FOR UPDATE
           ), deleted AS (
             DELETE FROM ${table} t USING doomed d
             WHERE (${columns.replace(/(\w+)/g, 't.$1')}) = (${columns.replace(/(\w+)/g, 'd.$1')})
             RETURNING 1
           )
           SELECT count(*)::int AS deleted FROM deleted`,
    values: [scope, key ?? null, limit],
  });
  return rows[0].deleted;
}

const RECORD_ROWS = [TABLE, 'scope, key'] as const;
/**
 * The steps of the records forgotten: not those of a claim of their key
 * made since the records' deletion (of a new generation, saved since it
 * began), which its retry needs.
 */
const STEP_ROWS = [
  STEPS,
  'scope, key, step',
  `NOT EXISTS (SELECT 1 FROM ${TABLE} r
     WHERE r.scope = x.scope AND r.key = x.key AND r.status = 'in_progress'
       AND r.created_at <= x.created_at)`,
] as const;
const FAILURE_ROWS = ['"idempotency_failures"', 'scope, key'] as const;

/**
 * The counts of failures deleted in a batch: none where the table of
 * migration CountIdempotencyFailures1764000000006 is absent (an application
 * that never counts).
 */
async function deleteFailures(
  connection: PostgresClient,
  scope: string,
  key: string | undefined,
  limit: number,
): Promise<number> {
  try {
    return await deleteBatch(connection, FAILURE_ROWS, scope, key, limit);
  } catch (error) {
    if (sqlState(error) === '42P01') {
      return 0;
    }
    throw error;
  }
}

/**
 * @internal One batch of `IdempotencyStore.forgetRecords`: records first,
 * then steps, then the counts of failures (not returned), each an
 * autocommit statement locking at most `batchSize` rows until it commits.
 */
export async function forgetPostgresRecords(
  connection: PostgresClient,
  scope: string,
  key: string | undefined,
  batchSize: number,
): Promise<ForgottenBatch> {
  const records = await deleteBatch(
    connection,
    RECORD_ROWS,
    scope,
    key,
    batchSize,
  );
  const steps =
    records < batchSize
      ? await deleteBatch(
          connection,
          STEP_ROWS,
          scope,
          key,
          batchSize - records,
        )
      : 0;
  const failures =
    records + steps < batchSize
      ? await deleteFailures(
          connection,
          scope,
          key,
          batchSize - records - steps,
        )
      : 0;
  return { records, steps, more: records + steps + failures === batchSize };
}

/**
 * @internal `IdempotencyStore.replaceResponse`: one statement, whose
 * condition on the stored body is the fence.
 */
export async function replacePostgresResponse(
  connection: PostgresClient,
  scope: string,
  key: string,
  expected: Buffer,
  response: StoredResponse,
  generation?: string,
): Promise<boolean> {
  const { rows } = await connection.query<{ key: string }>({
    text: `UPDATE ${TABLE} SET response_headers = $3, response_body = $4
           WHERE scope = $1 AND key = $2 AND status IN ('completed', 'failed')
             AND response_body = $5
             AND ($6::text IS NULL OR
               (extract(epoch FROM created_at) * 1000000)::bigint::text = $6)
           RETURNING key`,
    values: [
      scope,
      key,
      JSON.stringify(response.headers),
      response.body,
      expected,
      generation ?? null,
    ],
  });
  return rows.length === 1;
}

/** @internal `IdempotencyStore.readStepResults` of the PostgreSQL store. */
export async function readPostgresStepResults(
  connection: PostgresClient,
  scope: string,
  key: string,
): Promise<Array<{ step: string; result: unknown }>> {
  const { rows } = await connection.query<{ step: string; result: unknown }>({
    text: `SELECT step, result FROM ${STEPS}
           WHERE scope = $1 AND key = $2 ORDER BY step`,
    values: [scope, key],
  });
  return rows.map(({ step, result }) => ({ step, result: stepResult(result) }));
}

/** @internal `IdempotencyStore.replaceStepResult` of the PostgreSQL store. */
export async function replacePostgresStepResult(
  connection: PostgresClient,
  scope: string,
  key: string,
  step: string,
  expected: unknown,
  result: unknown,
): Promise<boolean> {
  const { rows } = await connection.query<{ step: string }>({
    text: `UPDATE ${STEPS} SET result = $5::jsonb
           WHERE scope = $1 AND key = $2 AND step = $3 AND result = $4::jsonb
           RETURNING step`,
    values: [scope, key, step, stepJson(expected), stepJson(result)],
  });
  return rows.length === 1;
}
