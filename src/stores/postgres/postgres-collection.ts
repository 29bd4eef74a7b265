import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../../idempotency.constants.js';
import type { AbandonedKey } from '../../interfaces/idempotency-store.interface.js';
import type { PostgresConnection } from '../../interfaces/postgres-adapter.interface.js';
import { sqlState } from '../../core/failures.js';
import { stepResult } from './postgres-step-result.js';

const TABLE = `"${IDEMPOTENCY_TABLE_NAME}"`;
const STEPS = `"${IDEMPOTENCY_STEPS_TABLE_NAME}"`;
/**
 * Whether step `s` belongs to its key's claim in progress (of the
 * generation it was saved in, see the store's `READ_STEP`): kept, whatever
 * its own expiry, until the record goes (the collector deletes a claim
 * once its lease and its binding have ended), completes, or a new
 * generation begins.
 */
const LIVE_GENERATION = `EXISTS (
  SELECT 1 FROM ${TABLE} r
  WHERE r.scope = s.scope AND r.key = s.key AND r.status = 'in_progress'
    AND r.created_at <= s.created_at)`;

/**
 * @internal Deletes at most `batchSize` expired records, or else expired
 * steps (see `IdempotencyStore.collect`), safe with many instances at once
 * (`FOR UPDATE SKIP LOCKED`).
 */
export async function collectExpired(
  connection: PostgresConnection,
  batchSize: number,
  abandoned: (key: AbandonedKey) => void,
): Promise<{ removed: number; more: boolean }> {
  const records = await connection.query<{ deleted: number }>({
    text: `WITH expired AS (
         SELECT scope, key FROM ${TABLE}
         WHERE expires_at < now()
           -- A claim is kept while its lease runs, past its ttl too.
           AND (status <> 'in_progress' OR lease_expires_at IS NULL
             OR lease_expires_at < now())
         ORDER BY expires_at
         LIMIT $1
         FOR UPDATE SKIP LOCKED
       ), deleted AS (
         DELETE FROM ${TABLE} r USING expired e
         WHERE r.scope = e.scope AND r.key = e.key
         RETURNING 1
       )
       SELECT count(*)::int AS deleted FROM deleted`,
    values: [batchSize],
  });
  const removed =
    records.rows[0].deleted +
    (await collectFailures(connection, batchSize - records.rows[0].deleted));
  if (removed >= batchSize) {
    return { removed, more: true };
  }
  // Expired steps are those of requests that never completed: a completion
  // deletes its key's steps. Each key is reported before the deletion
  // commits, so that a crash in between reports it again, and whole: a
  // key goes with all its expired steps or not at all. Only the rows this
  // statement locked are deleted, and a key of which another transaction
  // (another instance's collector) holds a step is left for a later
  // batch: deleting all of a key's steps after locking some of them would
  // wait for the others, and two collectors that each locked a step of
  // the same key would wait for each other (a deadlock, which fails both).
  const steps = await connection.transaction(async (client) => {
    const { rows } = await client.query<{
      scope: string;
      key: string;
      step: string;
      result: unknown;
    }>({
      text: `WITH picked AS (
           SELECT DISTINCT scope, key FROM (
             SELECT scope, key FROM ${STEPS} s
             WHERE expires_at < now() AND NOT ${LIVE_GENERATION}
             ORDER BY expires_at
             LIMIT $1
           ) oldest
         ), locked AS (
           SELECT s.scope, s.key, s.step FROM ${STEPS} s
           JOIN picked p ON p.scope = s.scope AND p.key = s.key
           WHERE s.expires_at < now() AND NOT ${LIVE_GENERATION}
           FOR UPDATE OF s SKIP LOCKED
         ), whole AS (
           SELECT p.scope, p.key FROM picked p
           WHERE NOT EXISTS (
             SELECT 1 FROM ${STEPS} s
             WHERE s.scope = p.scope AND s.key = p.key
               AND s.expires_at < now() AND NOT ${LIVE_GENERATION}
               AND NOT EXISTS (
                 SELECT 1 FROM locked l
                 WHERE l.scope = s.scope AND l.key = s.key AND l.step = s.step))
         )
         DELETE FROM ${STEPS} s
         USING locked l, whole w
         WHERE l.scope = w.scope AND l.key = w.key
           AND s.scope = l.scope AND s.key = l.key AND s.step = l.step
         RETURNING s.scope, s.key, s.step, s.result`,
      values: [batchSize - removed],
    });
    const keys = new Map<string, AbandonedKey>();
    for (const row of rows) {
      const id = `${row.scope}\u001f${row.key}`;
      const entry = keys.get(id) ?? {
        scope: row.scope,
        key: row.key,
        steps: [],
      };
      (entry.steps as Array<{ step: string; result: unknown }>).push({
        step: row.step,
        result: stepResult(row.result),
      });
      keys.set(id, entry);
    }
    for (const key of keys.values()) {
      abandoned(key);
    }
    return rows.length;
  });
  return {
    removed: removed + steps,
    more: removed + steps >= batchSize,
  };
}

/**
 * Deletes at most `batchSize` expired counts of failed attempts; none on a
 * database without their table (migration
 * CountIdempotencyFailures1764000000006 not run: nothing counts there).
 */
async function collectFailures(
  connection: PostgresConnection,
  batchSize: number,
): Promise<number> {
  if (batchSize <= 0) {
    return 0;
  }
  try {
    const { rows } = await connection.query<{ deleted: number }>({
      text: `WITH expired AS (
           SELECT scope, key FROM "idempotency_failures"
           WHERE expires_at < now()
           ORDER BY expires_at
           LIMIT $1
           FOR UPDATE SKIP LOCKED
         ), deleted AS (
           DELETE FROM "idempotency_failures" f USING expired e
           WHERE f.scope = e.scope AND f.key = e.key AND f.expires_at < now()
           RETURNING 1
         )
         SELECT count(*)::int AS deleted FROM deleted`,
      values: [batchSize],
    });
    return rows[0].deleted;
  } catch (error) {
    if (sqlState(error) === '42P01') {
      return 0;
    }
    throw error;
  }
}
