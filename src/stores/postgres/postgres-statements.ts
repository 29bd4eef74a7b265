import { Logger } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type {
  PostgresClient,
  PostgresResult,
} from '../../interfaces/postgres-adapter.interface.js';
import { sqlState } from '../../core/failures.js';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  TRANSACTION_MARK_SETTING,
} from '../../idempotency.constants.js';
import { messageOf } from '../../core/error-message.js';

/**
 * SQLSTATEs of a named statement that the server session does not have
 * (26000) or already has (42P05): what a transaction pooler without
 * prepared-statement support (PgBouncer before 1.21, or its
 * `max_prepared_statements = 0`) answers once a client's statements meet
 * another client's server session. Either is refused before the statement
 * runs.
 */
const UNSHARED_STATEMENT_CODES = new Set(['26000', '42P05']);

/** A statement of the store: its text, and the name it is prepared by. */
export interface PostgresStatement {
  readonly text: string;
  /**
   * The text's own name (a digest of it): two versions of the library behind
   * one pooler never bind each other's text to their values.
   */
  readonly name: string;
}

/** @internal A statement of the store, named after its text. */
export function postgresStatement(text: string): PostgresStatement {
  const digest = createHash('sha256').update(text).digest('hex').slice(0, 16);
  return { text, name: `idempotency_${digest}` };
}

/**
 * @internal Sends the store's statements as named prepared statements: each
 * connection parses and plans one once, then only binds it, which spares the
 * server most of the work of a short statement. Behind a transaction pooler
 * that cannot keep them, the first refusal turns them into unnamed ones for
 * good: a statement refused outside a transaction is sent again unnamed
 * (it did not run); one inside the handler's transaction fails it (the
 * transaction is aborted: the request gets its 503 and its retry runs).
 */
export class PostgresStatements {
  private named = true;

  constructor(private readonly logger = new Logger('Idempotency')) {}

  /**
   * Runs `statement` with `values` on `connection`.
   * @param inTransaction whether `connection` is in the handler's
   * transaction, which a refused statement aborts.
   */
  async query<R>(
    connection: PostgresClient,
    statement: PostgresStatement,
    values: unknown[],
    inTransaction = false,
  ): Promise<PostgresResult<R>> {
    const { text, name } = statement;
    if (!this.named) {
      return connection.query<R>({ text, values });
    }
    try {
      return await connection.query<R>({ name, text, values });
    } catch (error) {
      if (!UNSHARED_STATEMENT_CODES.has(sqlState(error) ?? '')) {
        throw error;
      }
      if (this.named) {
        this.named = false;
        this.logger.warn(
          `The database session did not keep a prepared statement (${messageOf(error)}): a transaction pooler without prepared-statement support stands between the application and PostgreSQL. The idempotency store sends unnamed statements from now on. (PgBouncer 1.21 and later keep them with max_prepared_statements > 0.)`,
        );
      }
      if (inTransaction) {
        throw error;
      }
      return connection.query<R>({ text, values });
    }
  }
}

const STEPS = `"${IDEMPOTENCY_STEPS_TABLE_NAME}"`;

/**
 * How long a claim's takeover, a duplicate's mark, a renewal or a release
 * waits for a lock of a record (held by another session: a completion
 * whose COMMIT is slow, an operator's `SELECT … FOR UPDATE`) before it
 * fails (`lock_timeout`, 55P03). Each is tried again (the renewal at its
 * next turn, the release until the lease runs out, a claim by its client
 * after its `503`), and the module stops waiting for it after a second at
 * least: left waiting in the server, each try would hold a connection of
 * the pool until the lock goes, one more every turn, until the pool is
 * exhausted and every request of the instance fails.
 */
const LOCK_WAIT = `set_config('lock_timeout', '1s', true) <> ''`;
/**
 * @internal Claims a key, taking it over where it may, and returns its
 * generation, or reads what holds it (migration
 * KeepIdempotencyGenerations1764000000005): after {@link CLAIM}, for a key
 * that may be taken over or that it did not see.
 */
export const ACQUIRE = postgresStatement(
  // The lock timeout (see LOCK_WAIT) is set in an argument: before the
  // function runs.
  `SELECT * FROM idempotency_acquire_generation($1, $2, $3, $4, $5, $6, $7,
     $8, $9, CASE WHEN ${LOCK_WAIT} THEN $10::boolean END)`,
);
/**
 * @internal The claim's fast path, one plain statement: a new key is
 * inserted (`ON CONFLICT DO NOTHING`), committed without waiting for the WAL
 * flush (`synchronous_commit` off for its own transaction), and its
 * generation returned. No row: the key is held, and {@link READ_HOLDER}
 * reads what holds it. So a new key costs one statement, a replay and a
 * refusal two, without the plpgsql call and the executor state of
 * {@link ACQUIRE}'s `DO UPDATE`, which cost PostgreSQL about 75 µs more a
 * claim and completion, nor the read of a held key in the same statement
 * (a data-modifying `WITH` and a `UNION ALL`), which cost a new key about
 * 80,000 more instructions of PostgreSQL (test/bench/README.md). A key that
 * may be taken over (a finished record expired, a lease run out, an owner's
 * instance whose presence lock is free) goes on to {@link ACQUIRE}, as does
 * a key that the read did not find (a release or the collector raced it).
 */
export const CLAIM = postgresStatement(
  `INSERT INTO "idempotency_records" AS t (scope, key, fingerprint, method,
     path, status, owner, owner_instance, lease_expires_at, expires_at)
   SELECT $1, $2, $3, $4, $5, 'in_progress', $6::uuid, $7::uuid,
     now() + $8::float8 * interval '1 millisecond',
     now() + greatest($9::float8, $8::float8) * interval '1 millisecond'
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
   ON CONFLICT (scope, key) DO NOTHING
   RETURNING (extract(epoch FROM t.created_at) * 1000000)::bigint::text
     AS generation`,
);
/**
 * @internal What holds a key that {@link CLAIM} did not take, in one JSON
 * column (`holder`, see {@link ClaimHolder}), its stored body beside it;
 * `$3`: the claiming instance.
 */
export const READ_HOLDER = postgresStatement(
  `SELECT json_build_array(r.status, r.fingerprint, r.response_status,
       r.response_headers, r.expires_at <= now(),
       greatest(0, extract(epoch FROM r.lease_expires_at - now()) * 1000)::float8,
       r.waiting, r.owner, r.has_steps,
       r.status = 'in_progress' AND r.owner_instance IS NOT NULL
         AND r.owner_instance IS DISTINCT FROM $3::uuid
         AND r.lease_expires_at > now()
         AND pg_try_advisory_xact_lock_shared(
           hashtextextended('idempotency:' || r.owner_instance::text, 0)))::text
       AS holder,
     r.response_body
     FROM "idempotency_records" r
    WHERE r.scope = $1 AND r.key = $2`,
);
/**
 * @internal What holds a key, as {@link READ_HOLDER} reads it: status,
 * fingerprint, response status, response headers, whether the record
 * expired, the lease's milliseconds left, whether a duplicate waits, the
 * owner, whether the key is bound to its request by steps, and whether the
 * owner's instance may be gone (its presence lock was free: a hint, which
 * {@link ACQUIRE} checks again; never for a claim of the claiming instance,
 * `$3` of {@link READ_HOLDER}, which is alive, asking, while its presence
 * session is away).
 */
export type ClaimHolder = [
  status: string,
  fingerprint: string,
  responseStatus: number | null,
  responseHeaders: Record<string, string | string[]> | null,
  expired: boolean,
  leaseMs: number,
  waiting: boolean,
  owner: string | null,
  hasSteps: boolean,
  ownerMayBeGone: boolean | null,
];
/** @internal A row of {@link CLAIM}: the generation of the key it took. */
export interface ClaimRow {
  readonly generation: string;
}
/** @internal A row of {@link READ_HOLDER}. */
export interface HolderRow {
  /** JSON of a {@link ClaimHolder}. */
  readonly holder: string;
  readonly response_body: Buffer | null;
}
/**
 * @internal Marks a claim in progress as awaited by a duplicate, which its
 * completion then notifies; fenced by the claim's owner, committed without
 * waiting for the WAL flush (a lost mark leaves the duplicate to its
 * polling). No row: the claim finished or was released meanwhile.
 */
export const MARK_WAITING = postgresStatement(
  `UPDATE "idempotency_records" t SET waiting = true
     FROM (SELECT set_config('synchronous_commit', 'off', true), ${LOCK_WAIT})
       AS async_commit
    WHERE t.scope = $1 AND t.key = $2 AND t.owner = $3
      AND t.status = 'in_progress'
   RETURNING true AS marked`,
);
/**
 * The record's completion in `table`, fenced by its owner (see
 * {@link completeStatements}). Its
 * times are the statement's, not `now()`: in the handler's transaction,
 * `now()` is when the transaction began, and a record completed `ttl` after
 * that would be born expired (its duplicate run again) once the
 * transaction lasted longer than its `ttl`.
 */
const updateRecord = (table: string) => `UPDATE ${table} t SET status = $4,
     response_status = $5, response_headers = $6, response_body = $7,
     lease_expires_at = NULL, completed_at = statement_timestamp(),
     expires_at = CASE WHEN t.expires_at <= statement_timestamp()
         OR t.expires_at > statement_timestamp() + $8 * interval '1 millisecond'
       THEN statement_timestamp() + $8 * interval '1 millisecond'
       ELSE t.expires_at END
   WHERE t.scope = $1 AND t.key = $2 AND t.owner = $3
     AND t.status = 'in_progress'`;

/** @internal `name` quoted as an SQL identifier. */
function identifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** @internal The statements a completion sends in the handler's transaction. */
export interface CompleteStatements {
  /**
   * Completes a claim, fenced by its owner: a plain `UPDATE` (no function)
   * that rewrites no indexed column in the usual case, so that PostgreSQL
   * can make it a heap-only update (no index touched). The record keeps the
   * expiry its claim gave it, `ttl` after the claim, unless that is already
   * past (a handler that outlived its `ttl`) or further than `ttl` from now
   * (a lease longer than the `ttl`, or a key bound by its steps): it then
   * expires `ttl` from now. No row: the claim is no longer this owner's, or
   * (`$9`, the transaction's mark: see `PostgresTransaction.mark`) the
   * session is no longer in the transaction the module began, which an end
   * sent by hand chained another one to. Its answer says whether the record
   * has steps (`has_steps`, which a binding sets before a step runs, and
   * {@link READ_STEP} on a step saved before 0.5.0), which `deleteSteps`
   * then deletes in the same transaction.
   *
   * Migration LeaseIdempotencyClaims1764000000003's `idempotency_finish` did
   * it all in plpgsql, deleting steps that were seldom there and moving the
   * indexed expiry each time; it stays, for instances of the previous
   * versions during a rolling upgrade.
   */
  readonly complete: PostgresStatement;
  /** Deletes the steps of a key completed in this transaction. */
  readonly deleteSteps: PostgresStatement;
}

/**
 * @internal The statements a completion sends in the handler's transaction,
 * their tables named in `schema`, the one the claims found them in (none:
 * by the session's `search_path`). The handler may have set its
 * transaction's `search_path` (`SET LOCAL`, a tenant's schema): the record
 * must complete in the table its claim is in, not in one of the tenant's or
 * none.
 */
export function completeStatements(schema?: string | null): CompleteStatements {
  const prefix = schema ? `${identifier(schema)}.` : '';
  return {
    complete: postgresStatement(
      `${updateRecord(`${prefix}"${IDEMPOTENCY_TABLE_NAME}"`)}
     AND ($9::text IS NULL
       OR current_setting('${TRANSACTION_MARK_SETTING}', true) = $9)
   RETURNING t.waiting, t.has_steps`,
    ),
    deleteSteps: postgresStatement(
      `DELETE FROM ${prefix}${STEPS} WHERE scope = $1 AND key = $2`,
    ),
  };
}

/**
 * @internal The mark of the transaction the session is in (see
 * {@link CompleteStatements.complete}): read when a marked completion found
 * no row.
 */
export const READ_MARK = postgresStatement(
  `SELECT current_setting('${TRANSACTION_MARK_SETTING}', true) AS mark`,
);
/**
 * @internal {@link CompleteStatements}' two in one statement, for a
 * completion without a transaction of the handler's: the steps never outlive
 * the record's completion, nor go without it. (A data-modifying `WITH` costs
 * PostgreSQL more than the plain `UPDATE`: test/bench/README.md.)
 */
export const COMPLETE_ALONE = postgresStatement(
  `WITH done AS (
     ${updateRecord(`"${IDEMPOTENCY_TABLE_NAME}"`)}
     RETURNING t.scope, t.key, t.waiting, t.has_steps
   ), steps AS (
     DELETE FROM ${STEPS} s USING done
     WHERE done.has_steps AND s.scope = done.scope AND s.key = done.key
   )
   SELECT waiting, false AS has_steps FROM done`,
);
/** @internal Gives a claim up, fenced by its owner, binding its key to its request or not. */
export const RELEASE = postgresStatement(
  // The lock timeout is set in an argument: before the function runs.
  `SELECT * FROM idempotency_release($1, $2, $3,
     CASE WHEN ${LOCK_WAIT} THEN $4::boolean END)`,
);
/** @internal Renews the leases of claims, fenced by their owners. */
export const RENEW = postgresStatement(
  `SELECT owner FROM idempotency_renew($1, $2, $3,
     CASE WHEN ${LOCK_WAIT} THEN $4::float8[] END) AS owner`,
);
/**
 * @internal Binds a claim's key to its request before a step runs, fenced by
 * its owner (migration BindIdempotencySteps1764000000004's `has_steps`), at
 * least `$4` ms from now (the record's expiry, which a takeover keeps while
 * the key is bound; `NULL`: as it is). Committed durably: the step's effect
 * follows.
 */
export const BIND = postgresStatement(
  `UPDATE "idempotency_records" SET has_steps = true,
     expires_at = greatest(expires_at, now() + $4 * interval '1 millisecond')
   WHERE scope = $1 AND key = $2 AND owner = $3 AND status = 'in_progress'`,
);
/**
 * @internal The stored result of a step, for the request it binds the key to:
 * a step of the generation its reader's claim holds (saved since the
 * generation began, its record's `created_at`, which a takeover of a bound
 * key keeps), however old, while the claim is in progress; never one of an
 * earlier generation. (Its own `expires_at` is the collector's: a step read
 * by its expiry would be lost to an attempt that took the key over late in
 * the binding, which runs its effect again.)
 * A step saved before 0.5.0 has no fingerprint and its key no `has_steps`
 * mark (nor a record of its own generation): it is read, by any request of
 * its key, until it expires, as it was; found, it marks the record its
 * reader owns, so that the completion
 * deletes it with the key's other steps ({@link CompleteStatements}).
 */
export const READ_STEP = postgresStatement(
  `WITH found AS (
     SELECT s.result, s.fingerprint FROM ${STEPS} s
       JOIN "idempotency_records" r ON r.scope = s.scope AND r.key = s.key
     WHERE s.scope = $1 AND s.key = $2 AND s.step = $3
       AND r.owner = $5 AND r.status = 'in_progress'
       AND (s.fingerprint = $4 AND s.created_at >= r.created_at
         -- Saved before 0.5.0, before generations: until it expires.
         OR s.fingerprint IS NULL AND s.expires_at > now())
   ), marked AS (
     UPDATE "idempotency_records" SET has_steps = true
     WHERE scope = $1 AND key = $2 AND owner = $5 AND status = 'in_progress'
       AND NOT has_steps
       AND EXISTS (SELECT 1 FROM found WHERE found.fingerprint IS NULL)
   )
   SELECT result FROM found`,
);
/** @internal Saves a step's result, fenced by the claim's owner. */
export const SAVE_STEP = postgresStatement(
  `SELECT idempotency_save_step($1, $2, $3, $4, $5, $6) AS saved`,
);
/** @internal Forgets a key's count of failed attempts. */
export const FORGET_FAILURES = postgresStatement(
  `DELETE FROM "idempotency_failures" WHERE scope = $1 AND key = $2`,
);
/**
 * @internal Counts a failed attempt of a key, in a row that outlives the
 * claim and the record (migration CountIdempotencyFailures1764000000006);
 * a count whose row expired starts again.
 */
export const COUNT_FAILURE = postgresStatement(
  `INSERT INTO "idempotency_failures" AS f (scope, key, failures, expires_at)
   VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
   ON CONFLICT (scope, key) DO UPDATE SET
     failures = CASE WHEN f.expires_at > now() THEN f.failures + 1 ELSE 1 END,
     expires_at = EXCLUDED.expires_at
   RETURNING failures`,
);
