import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';

/** @internal `idempotency_acquire` as 0.3.0 created it (see its migration). */
export const ACQUIRE_0_3 = `
      CREATE FUNCTION "idempotency_acquire"(
        p_scope text, p_key text, p_fingerprint text, p_method text, p_path text,
        p_owner uuid, p_instance uuid, p_lease_ms float8, p_ttl_ms float8, p_wait boolean
      ) RETURNS TABLE (
        acquired boolean, status text, fingerprint text, response_status smallint,
        response_headers jsonb, response_body bytea, lease_ms float8
      ) LANGUAGE plpgsql AS $$
      #variable_conflict use_column
      DECLARE
        r record;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        FOR attempt IN 1..5 LOOP
          INSERT INTO "idempotency_records" AS t (scope, key, fingerprint, method, path,
            status, owner, owner_instance, lease_expires_at, expires_at)
          VALUES (p_scope, p_key, p_fingerprint, p_method, p_path, 'in_progress', p_owner,
            p_instance, now() + p_lease_ms * interval '1 millisecond',
            now() + greatest(p_ttl_ms, p_lease_ms) * interval '1 millisecond')
          ON CONFLICT (scope, key) DO UPDATE SET
            fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
            status = 'in_progress', owner = EXCLUDED.owner,
            owner_instance = EXCLUDED.owner_instance,
            lease_expires_at = EXCLUDED.lease_expires_at, waiting = false,
            response_status = NULL, response_headers = NULL, response_body = NULL,
            created_at = now(), completed_at = NULL, expires_at = EXCLUDED.expires_at
          WHERE CASE WHEN t.status <> 'in_progress' THEN t.expires_at <= now()
            ELSE t.lease_expires_at IS NULL OR t.lease_expires_at <= now()
              OR (t.owner_instance IS NOT NULL AND pg_try_advisory_xact_lock_shared(
                hashtextextended('idempotency:' || t.owner_instance::text, 0))
                -- Behind a transaction pooler, this very server session may
                -- be the one holding the presence lock (a lock is
                -- re-entrant within its session): that instance is alive.
                AND NOT EXISTS (
                  SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                     AND l.mode = 'ExclusiveLock' AND l.granted AND l.objsubid = 1
                     AND l.classid = ((hashtextextended('idempotency:' || t.owner_instance::text, 0) >> 32) & 4294967295)::oid
                     AND l.objid = (hashtextextended('idempotency:' || t.owner_instance::text, 0) & 4294967295)::oid))
            END
          RETURNING true INTO acquired;
          IF acquired THEN
            RETURN NEXT;
            RETURN;
          END IF;
          SELECT t.status, t.fingerprint, t.response_status, t.response_headers,
                 t.response_body, t.lease_expires_at, t.waiting, t.owner
            INTO r FROM "idempotency_records" t
           WHERE t.scope = p_scope AND t.key = p_key;
          IF FOUND THEN
            IF p_wait AND r.status = 'in_progress' AND r.fingerprint = p_fingerprint
               AND NOT r.waiting THEN
              UPDATE "idempotency_records" t SET waiting = true
               WHERE t.scope = p_scope AND t.key = p_key AND t.owner = r.owner;
            END IF;
            acquired := false;
            status := r.status;
            fingerprint := r.fingerprint;
            response_status := r.response_status;
            response_headers := r.response_headers;
            response_body := r.response_body;
            lease_ms := greatest(0, extract(epoch FROM r.lease_expires_at - now()) * 1000);
            RETURN NEXT;
            RETURN;
          END IF;
          -- Released between the two statements: claim again.
        END LOOP;
        acquired := false;
        RETURN NEXT;
      END
      $$`;

/** @internal `idempotency_release` as 0.3.0 created it. */
export const RELEASE_0_3 = `
      CREATE FUNCTION "idempotency_release"(p_scope text, p_key text, p_owner uuid)
      RETURNS TABLE (released boolean, waiting boolean) LANGUAGE plpgsql AS $$
      #variable_conflict use_column
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        DELETE FROM "idempotency_records" t
         WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
           AND t.status = 'in_progress'
        RETURNING true, t.waiting INTO released, waiting;
        released := coalesce(released, false);
        waiting := coalesce(waiting, false);
        RETURN NEXT;
      END
      $$`;

/** @internal `idempotency_save_step` as 0.3.0 created it. */
export const SAVE_STEP_0_3 = `
      CREATE FUNCTION "idempotency_save_step"(
        p_scope text, p_key text, p_owner uuid, p_step text, p_result jsonb, p_ttl_ms float8
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM 1 FROM "idempotency_records" t
         WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
           AND t.status = 'in_progress'
         FOR SHARE;
        IF NOT FOUND THEN
          RETURN false;
        END IF;
        INSERT INTO "idempotency_steps" (scope, key, step, result, expires_at)
        VALUES (p_scope, p_key, p_step, p_result, now() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (scope, key, step) DO UPDATE SET
          result = EXCLUDED.result, created_at = now(), expires_at = EXCLUDED.expires_at;
        RETURN true;
      END
      $$`;

/**
 * Leased claims (0.3.0): a key is claimed by an `in_progress` row that names
 * its owner (a random token per attempt) and the lease it holds, instead of
 * an advisory lock held by an open transaction for the whole handler.
 *
 * Alters the installed table (three nullable columns and one with a constant
 * default: no rewrite, no record lost) and adds the functions the module
 * calls. The functions of 0.1.0 and 0.2.0 (`idempotency_claim`,
 * `idempotency_complete`) stay, so that instances of the previous version
 * keep running during a rolling upgrade; a later major release drops them.
 */
export class LeaseIdempotencyClaims1764000000003 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'LeaseIdempotencyClaims1764000000003';

  /** Adds the columns of a lease and the functions of the claim protocol. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`
      ALTER TABLE "idempotency_records"
        ADD COLUMN "owner" uuid,
        ADD COLUMN "owner_instance" uuid,
        ADD COLUMN "lease_expires_at" timestamptz,
        ADD COLUMN "waiting" boolean NOT NULL DEFAULT false`);
    // Claims a key: one statement, committed without waiting for the WAL
    // flush (a claim lost in a server crash only lets a retry run again; the
    // fenced completion keeps the handler's writes to one commit). Takes the
    // row over when it is finished and expired, when its lease expired, or
    // when its owner's instance holds no presence lock (the instance is gone).
    // The presence lock is tried shared: it still conflicts with the
    // instance's exclusive session lock, but two claims taking over keys of
    // the same dead instance at once do not block each other. pg_locks is
    // read only on that rare path, when the try succeeded.
    // Otherwise returns the row as it is, and marks it `waiting` for a
    // duplicate that waits for it (the owner then notifies on completion).
    await queryRunner.query(ACQUIRE_0_3);
    // Completes a claim: writes the response into the row, fenced by the
    // owner's token, and clears the key's recovery points. Called in the
    // handler's transaction: no row means the lease was lost, and that
    // transaction must roll back.
    await queryRunner.query(`
      CREATE FUNCTION "idempotency_finish"(
        p_scope text, p_key text, p_owner uuid, p_status text, p_response_status integer,
        p_response_headers jsonb, p_response_body bytea, p_ttl_ms float8
      ) RETURNS TABLE (finished boolean, waiting boolean) LANGUAGE plpgsql AS $$
      #variable_conflict use_column
      BEGIN
        UPDATE "idempotency_records" t SET status = p_status,
          response_status = p_response_status, response_headers = p_response_headers,
          response_body = p_response_body, lease_expires_at = NULL, completed_at = now(),
          expires_at = now() + p_ttl_ms * interval '1 millisecond'
        WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
          AND t.status = 'in_progress'
        RETURNING true, t.waiting INTO finished, waiting;
        IF finished THEN
          DELETE FROM "idempotency_steps" s WHERE s.scope = p_scope AND s.key = p_key;
        ELSE
          finished := false;
          waiting := false;
        END IF;
        RETURN NEXT;
      END
      $$`);
    // Gives a claim up (its handler failed): the next attempt runs at once.
    await queryRunner.query(RELEASE_0_3);
    // Renews the leases of the attempts an instance runs, each for its own
    // duration (never past its deadline); returns the owners still holding
    // their claim.
    await queryRunner.query(`
      CREATE FUNCTION "idempotency_renew"(
        p_scopes text[], p_keys text[], p_owners uuid[], p_lease_ms float8[]
      ) RETURNS SETOF uuid LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN QUERY
        WITH renewed AS (
          UPDATE "idempotency_records" t
             SET lease_expires_at = now() + a.lease_ms * interval '1 millisecond'
            FROM unnest(p_scopes, p_keys, p_owners, p_lease_ms) AS a(scope, key, owner, lease_ms)
           WHERE t.scope = a.scope AND t.key = a.key AND t.owner = a.owner
             AND t.status = 'in_progress'
          RETURNING t.owner
        )
        SELECT renewed.owner FROM renewed;
      END
      $$`);
    // Commits the result of a recovery point, fenced by the owner's token:
    // the claim's row is locked (shared) so that no takeover slips between
    // the check and the write.
    await queryRunner.query(SAVE_STEP_0_3);
  }

  /** Drops the functions and the columns it added. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(
      `DROP FUNCTION "idempotency_save_step"(text, text, uuid, text, jsonb, float8)`,
    );
    await queryRunner.query(
      `DROP FUNCTION "idempotency_renew"(text[], text[], uuid[], float8[])`,
    );
    await queryRunner.query(
      `DROP FUNCTION "idempotency_release"(text, text, uuid)`,
    );
    await queryRunner.query(
      `DROP FUNCTION "idempotency_finish"(text, text, uuid, text, integer, jsonb, bytea, float8)`,
    );
    await queryRunner.query(
      `DROP FUNCTION "idempotency_acquire"(text, text, text, text, text, uuid, uuid, float8, float8, boolean)`,
    );
    // In-progress claims have no meaning to the previous version.
    await queryRunner.query(
      `DELETE FROM "idempotency_records" WHERE status = 'in_progress'`,
    );
    await queryRunner.query(`
      ALTER TABLE "idempotency_records"
        DROP COLUMN "waiting",
        DROP COLUMN "lease_expires_at",
        DROP COLUMN "owner_instance",
        DROP COLUMN "owner"`);
  }
}
