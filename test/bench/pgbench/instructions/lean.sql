-- The lean floor's claim and completion of a new key (bench-app/lean-keys.ts; its table: LEAN_TABLE there).
PREPARE c(text,text,uuid) AS INSERT INTO bench_lean_keys AS k (key, fingerprint, owner, lease_expires_at, status, expires_at) SELECT $1, $2, $3, now() + interval '15 seconds', 'in_progress', now() + interval '24 hours' FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, owner = EXCLUDED.owner, lease_expires_at = EXCLUDED.lease_expires_at, status = 'in_progress', response_status = NULL, response_body = NULL, expires_at = EXCLUDED.expires_at WHERE k.expires_at <= now() OR (k.status = 'in_progress' AND k.lease_expires_at <= now())
PREPARE f(text,uuid,smallint,bytea) AS UPDATE bench_lean_keys SET status = 'completed', response_status = $3, response_body = $4, lease_expires_at = NULL WHERE key = $1 AND owner = $2 AND status = 'in_progress'
--> iteration
EXECUTE c('k{i}', 'v2:abababababababababababababababababababababababababababababababab', '{uuid}')
BEGIN
EXECUTE f('k{i}', '{uuid}', 201, '\x7b227265666572656e6365223a2261626364222c22616d6f756e74223a313030302c226964223a2231323334227d'::bytea)
COMMIT
