-- nestjs-idempotency: the TypeORM migration KeepIdempotencyGenerations1764000000005
-- (migrations/1764000000005-keep-idempotency-generations.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000005-keep-idempotency-generations.sql

      CREATE FUNCTION "idempotency_acquire_generation"(
        p_scope text, p_key text, p_fingerprint text, p_method text, p_path text,
        p_owner uuid, p_instance uuid, p_lease_ms float8, p_ttl_ms float8, p_wait boolean
      ) RETURNS TABLE (
        acquired boolean, status text, fingerprint text, response_status smallint,
        response_headers jsonb, response_body bytea, lease_ms float8, generation text
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
            created_at = CASE WHEN t.status = 'in_progress' AND t.expires_at > now()
              THEN t.created_at ELSE now() END,
            completed_at = NULL,
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
          RETURNING true, (extract(epoch FROM t.created_at) * 1000000)::bigint::text
            INTO acquired, generation;
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
      $$;

--> statement-breakpoint

      CREATE FUNCTION "idempotency_release"(
        p_scope text, p_key text, p_owner uuid, p_bind boolean
      ) RETURNS TABLE (released boolean, waiting boolean) LANGUAGE plpgsql AS $$
      #variable_conflict use_column
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        IF NOT p_bind THEN
          DELETE FROM "idempotency_records" t
           WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
             AND t.status = 'in_progress' AND NOT t.has_steps
          RETURNING true, t.waiting INTO released, waiting;
        END IF;
        IF released IS NULL THEN
          UPDATE "idempotency_records" t
             SET owner = NULL, owner_instance = NULL, lease_expires_at = now(),
                 has_steps = true
           WHERE t.scope = p_scope AND t.key = p_key AND t.owner = p_owner
             AND t.status = 'in_progress'
          RETURNING true, t.waiting INTO released, waiting;
        END IF;
        released := coalesce(released, false);
        waiting := coalesce(waiting, false);
        RETURN NEXT;
      END
      $$;
