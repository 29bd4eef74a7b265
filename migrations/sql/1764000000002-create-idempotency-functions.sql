-- nestjs-idempotency: the TypeORM migration CreateIdempotencyFunctions1764000000002
-- (migrations/1764000000002-create-idempotency-functions.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000002-create-idempotency-functions.sql

      CREATE FUNCTION "idempotency_claim"(
        p_scope text, p_key text, p_fingerprint text, p_timeout text
      ) RETURNS TABLE (
        fingerprint_locked boolean, locked boolean, status text, fingerprint text,
        response_status smallint, response_headers jsonb, response_body bytea
      ) LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM set_config('statement_timeout', p_timeout, true),
          set_config('idle_in_transaction_session_timeout', p_timeout, true);
        -- PostgreSQL 17 also bounds the transaction as a whole.
        IF current_setting('server_version_num')::int >= 170000 THEN
          PERFORM set_config('transaction_timeout', p_timeout, true);
        END IF;
        fingerprint_locked := pg_try_advisory_xact_lock(
          hashtextextended(p_scope || chr(31) || p_key || chr(31) || p_fingerprint, 0));
        IF fingerprint_locked THEN
          locked := pg_try_advisory_xact_lock(hashtextextended(p_scope || chr(31) || p_key, 0));
        ELSE
          locked := false;
        END IF;
        SELECT r.status, r.fingerprint, r.response_status, r.response_headers, r.response_body
          INTO status, fingerprint, response_status, response_headers, response_body
          FROM "idempotency_records" r
         WHERE r.scope = p_scope AND r.key = p_key
           AND r.status <> 'in_progress' AND r.expires_at > now();
        RETURN NEXT;
      END
      $$;

--> statement-breakpoint

      CREATE FUNCTION "idempotency_complete"(
        p_scope text, p_key text, p_fingerprint text, p_method text, p_path text,
        p_status text, p_response_status integer, p_response_headers jsonb,
        p_response_body bytea, p_ttl_ms float8
      ) RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM "idempotency_steps" s WHERE s.scope = p_scope AND s.key = p_key;
        INSERT INTO "idempotency_records" AS r (scope, key, fingerprint, method, path,
          status, response_status, response_headers, response_body, completed_at, expires_at)
        VALUES (p_scope, p_key, p_fingerprint, p_method, p_path, p_status, p_response_status,
          p_response_headers, p_response_body, now(), now() + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT (scope, key) DO UPDATE SET
          fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
          status = EXCLUDED.status, response_status = EXCLUDED.response_status,
          response_headers = EXCLUDED.response_headers, response_body = EXCLUDED.response_body,
          created_at = now(), completed_at = now(), expires_at = EXCLUDED.expires_at
        WHERE r.expires_at <= now();
        IF NOT FOUND THEN
          RAISE EXCEPTION 'idempotency record of key % already exists', p_key
            USING ERRCODE = 'unique_violation',
              HINT = 'The key was executed by a transaction that did not hold its advisory lock.';
        END IF;
      END
      $$;
