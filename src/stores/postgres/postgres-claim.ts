import type { PostgresConnection } from '../../interfaces/postgres-adapter.interface.js';
import type {
  ClaimOutcome,
  ClaimRequest,
  RecordStatus,
} from '../../interfaces/idempotency-store.interface.js';
import {
  ACQUIRE,
  CLAIM,
  MARK_WAITING,
  READ_HOLDER,
  type ClaimHolder,
  type ClaimRow,
  type HolderRow,
  type PostgresStatements,
} from './postgres-statements.js';

/** A row of {@link ACQUIRE}. */
interface AcquireRow {
  acquired: boolean;
  status: RecordStatus | 'in_progress' | null;
  fingerprint: string | null;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | null;
  response_body: Buffer | null;
  lease_ms: number | null;
  generation: string | null;
}

/** The statuses of a finished record: what the module writes. */
const FINISHED: ReadonlySet<string> = new Set<RecordStatus>([
  'completed',
  'failed',
  'not_replayable',
]);

/**
 * A claim's outcome for a finished record.
 * @throws Error for a status the module never writes (the table has no
 * check on it since migration DropIdempotencyStatusCheck1764000000007: a
 * record changed by hand), instead of replaying it as finished.
 */
function finished(
  status: string,
  fingerprint: string | null,
  response: {
    status: number;
    headers: Record<string, string | string[]>;
    body: Buffer;
  },
): ClaimOutcome {
  if (!FINISHED.has(status)) {
    throw new Error(
      `The idempotency record of the key has the status ${JSON.stringify(status)}, which the module never writes (a record changed by hand): the request is not answered from it. Forget the record (IdempotencyAdmin.forget, or the command line's forget), or set its status to one the module writes.`,
    );
  }
  return {
    state: 'finished',
    record: {
      status: status as RecordStatus,
      fingerprint: fingerprint ?? '',
      response,
    },
  };
}

/**
 * @internal Claims `request`'s key on PostgreSQL: {@link CLAIM} first, one
 * statement for a new key; {@link READ_HOLDER} after it for a key held (a
 * replay or a refusal: two statements); {@link ACQUIRE} last, for a key that
 * may be taken over or that the read did not find.
 */
export async function claimPostgresKey(
  statements: PostgresStatements,
  pool: PostgresConnection,
  instance: string | null,
  request: ClaimRequest,
  /**
   * The claiming instance's id, its presence lock held or not: a claim of
   * its own is never taken for one whose instance is gone (its presence
   * session dropped, it lives, and its handler may still run).
   */
  self: string | null = instance,
): Promise<ClaimOutcome> {
  const values: unknown[] = [
    request.scope,
    request.key,
    request.fingerprint,
    request.method,
    request.path,
    request.owner,
    instance,
    request.leaseMs,
    request.ttlMs,
  ];
  const {
    rows: [claimed],
  } = await statements.query<ClaimRow>(pool, CLAIM, values);
  if (claimed) {
    return { state: 'claimed', generation: claimed.generation };
  }
  const {
    rows: [holder],
  } = await statements.query<HolderRow>(pool, READ_HOLDER, [
    request.scope,
    request.key,
    self,
  ]);
  if (holder) {
    const outcome = await held(
      statements,
      pool,
      request,
      JSON.parse(holder.holder) as ClaimHolder,
      holder.response_body,
    );
    if (outcome) {
      return outcome;
    }
  }
  // A key that may be taken over, or that the statement did not see.
  values.push(request.wait);
  const {
    rows: [row],
  } = await statements.query<AcquireRow>(pool, ACQUIRE, values);
  if (row.acquired) {
    return { state: 'claimed', generation: row.generation! };
  }
  if (row.status && row.status !== 'in_progress') {
    return finished(row.status, row.fingerprint, {
      status: row.response_status ?? 0,
      headers: row.response_headers ?? {},
      body: row.response_body ?? Buffer.alloc(0),
    });
  }
  return {
    state: 'in_progress',
    fingerprint: row.fingerprint ?? undefined,
    leaseMs: row.lease_ms ?? 0,
  };
}

/**
 * The outcome of a claim that found its key held, from what holds it;
 * none when the key may be taken over (the function decides) or the claim
 * a duplicate would wait for ended meanwhile.
 */
async function held(
  statements: PostgresStatements,
  pool: PostgresConnection,
  request: ClaimRequest,
  holder: ClaimHolder,
  body: Buffer | null,
): Promise<ClaimOutcome | undefined> {
  const [
    status,
    fingerprint,
    responseStatus,
    headers,
    expired,
    leaseMs,
    waiting,
    owner,
    hasSteps,
    ownerMayBeGone,
  ] = holder;
  if (status !== 'in_progress') {
    return expired
      ? undefined
      : finished(status, fingerprint, {
          status: responseStatus ?? 0,
          headers: headers ?? {},
          body: body ?? Buffer.alloc(0),
        });
  }
  const bound = hasSteps && fingerprint !== request.fingerprint && !expired;
  if (!bound && (leaseMs <= 0 || ownerMayBeGone)) {
    return undefined;
  }
  if (request.wait && fingerprint === request.fingerprint && !waiting) {
    const { rows } = await statements.query(pool, MARK_WAITING, [
      request.scope,
      request.key,
      owner,
    ]);
    if (rows.length === 0) {
      return undefined;
    }
  }
  return { state: 'in_progress', fingerprint, leaseMs };
}
