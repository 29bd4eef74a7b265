-- The lean floor's claim and completion (test/bench/bench-app/lean-keys.ts), a new key; its table: `LEAN_TABLE` there.
SELECT gen_random_uuid()::text AS owner, gen_random_uuid()::text AS k, md5(random()::text) || md5(random()::text) AS fp \gset
INSERT INTO bench_lean_keys AS k (key, fingerprint, owner, lease_expires_at, status, expires_at) SELECT :k, :fp, :owner::uuid, now() + interval '15 seconds', 'in_progress', now() + interval '24 hours' FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, owner = EXCLUDED.owner, lease_expires_at = EXCLUDED.lease_expires_at, status = 'in_progress', response_status = NULL, response_body = NULL, expires_at = EXCLUDED.expires_at WHERE k.expires_at <= now() OR (k.status = 'in_progress' AND k.lease_expires_at <= now());
BEGIN;
UPDATE bench_lean_keys SET status = 'completed', response_status = 201, response_body = '\x7b227265666572656e6365223a2261626364222c22616d6f756e74223a313030302c226964223a2231323334227d'::bytea WHERE key = :k AND owner = :owner::uuid AND status = 'in_progress';
COMMIT;
