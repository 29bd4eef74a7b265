import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';
import {
  ACQUIRE_0_3,
  RELEASE_0_3,
  SAVE_STEP_0_3,
} from './1764000000003-lease-idempotency-claims.js';

/** Makes a `CREATE FUNCTION` statement replace the function of that name. */
function replacing(statement: string): string {
  return statement.replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION');
}

/**
 * Recovery points bound to their request (0.5.0): a key with a committed
 * step stays bound to the fingerprint of the request that saved it, until
 * the key completes or expires, also once that request's claim was
 * released or taken over. Another request under the key is refused (422);
 * the same one claims it at once and resumes after its last step.
 *
 * Alters the installed tables (a nullable column, and one with a constant
 * default: no rewrite, no record lost) and replaces three functions in
 * place, with their signatures unchanged: instances of the previous version
 * keep running during a rolling upgrade, and keep the binding too.
 */
export class BindIdempotencySteps1764000000004 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'BindIdempotencySteps1764000000004';

  /** Adds the columns of the binding and replaces the functions. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    // A step saved by the previous version has no fingerprint: it stays
    // readable by any request of its key, as it was.
    await queryRunner.query(
      `ALTER TABLE "idempotency_steps" ADD COLUMN "fingerprint" text`,
    );
    await queryRunner.query(`
      ALTER TABLE "idempotency_records"
        ADD COLUMN "has_steps" boolean NOT NULL DEFAULT false`);
    // As in 0.3.0, except that a claim in progress whose key has a committed
    // step is taken over only by the same request (or once the key
    // expired); another request gets the row, and with it the fingerprint
    // it is refused by. A takeover by the same request keeps the binding.
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION "idempotency_acquire"(
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
            created_at = now(), completed_at = NULL,
            expires_at = greatest(EXCLUDED.expires_at,
              CASE WHEN t.status = 'in_progress' AND t.has_steps THEN t.expires_at END),
            has_steps = t.status = 'in_progress' AND t.has_steps
              AND t.fingerprint = EXCLUDED.fingerprint AND t.expires_at > now()
          WHERE CASE WHEN t.status <> 'in_progress' THEN t.expires_at <= now()
            WHEN t.has_steps AND t.fingerprint <> EXCLUDED.fingerprint
              AND t.expires_at > now() THEN false
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
      $$`);
    // Gives a claim up. A claim that committed a step leaves its row behind,
    // without an owner and with its lease expired: the same request claims
    // it at once, another one is refused by its fingerprint.
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION "idempotency_release"(p_scope text, p_key text, p_owner uuid)
      RETURNS TABLE (released boolean, waiting boolean) LANGUAGE plpgsql AS $$
      #variable_conflict use_column
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        DELETE FROM "idempotency_records" t
         WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
           AND t.status = 'in_progress' AND NOT t.has_steps
        RETURNING true, t.waiting INTO released, waiting;
        IF released IS NULL THEN
          UPDATE "idempotency_records" t
             SET owner = NULL, owner_instance = NULL, lease_expires_at = now()
           WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
             AND t.status = 'in_progress' AND t.has_steps
          RETURNING true, t.waiting INTO released, waiting;
        END IF;
        released := coalesce(released, false);
        waiting := coalesce(waiting, false);
        RETURN NEXT;
      END
      $$`);
    // Commits the result of a recovery point, fenced by the owner's token,
    // with the fingerprint of the claim's request: the claim's row is locked
    // so that no takeover slips between the check and the write, marked as
    // bound, and kept at least as long as the step.
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION "idempotency_save_step"(
        p_scope text, p_key text, p_owner uuid, p_step text, p_result jsonb, p_ttl_ms float8
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      DECLARE
        v_fingerprint text;
      BEGIN
        UPDATE "idempotency_records" t SET has_steps = true,
               expires_at = greatest(t.expires_at, now() + p_ttl_ms * interval '1 millisecond')
         WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
           AND t.status = 'in_progress'
        RETURNING t.fingerprint INTO v_fingerprint;
        IF NOT FOUND THEN
          RETURN false;
        END IF;
        INSERT INTO "idempotency_steps" (scope, key, step, fingerprint, result, expires_at)
        VALUES (p_scope, p_key, p_step, v_fingerprint, p_result,
          now() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (scope, key, step) DO UPDATE SET
          fingerprint = EXCLUDED.fingerprint, result = EXCLUDED.result,
          created_at = now(), expires_at = EXCLUDED.expires_at;
        RETURN true;
      END
      $$`);
  }

  /** Puts back the functions of 0.3.0 and drops the columns it added. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    for (const statement of [ACQUIRE_0_3, RELEASE_0_3, SAVE_STEP_0_3]) {
      await queryRunner.query(replacing(statement));
    }
    // A released claim kept for its steps has no owner: to the previous
    // version, a free key.
    await queryRunner.query(
      `DELETE FROM "idempotency_records" WHERE status = 'in_progress' AND owner IS NULL`,
    );
    await queryRunner.query(
      `ALTER TABLE "idempotency_records" DROP COLUMN "has_steps"`,
    );
    await queryRunner.query(
      `ALTER TABLE "idempotency_steps" DROP COLUMN "fingerprint"`,
    );
  }
}
