-- A claim (a plain INSERT, the same in every complete-*.sql), then the completion in a transaction: idempotency_finish (plpgsql: UPDATE moving expires_at, DELETE of the steps).
SELECT gen_random_uuid()::text AS owner, md5(random()::text) AS k \gset
INSERT INTO idempotency_records AS t (scope, key, fingerprint, method, path, status, owner, owner_instance, lease_expires_at, expires_at) SELECT 's', :k, 'fp0123456789abcdef', 'POST', '/modes/light', 'in_progress', :owner::uuid, NULL, now() + 30000 * interval '1 millisecond', now() + 86400000 * interval '1 millisecond' FROM (SELECT set_config('synchronous_commit', 'off', true)) AS c ON CONFLICT (scope, key) DO NOTHING RETURNING (extract(epoch FROM t.created_at) * 1000000)::bigint::text AS generation;
BEGIN;
SELECT * FROM idempotency_finish('s', :k, :owner::uuid, 'completed', 201, '{"content-type":"application/json; charset=utf-8"}', '\x7b227265666572656e6365223a2261626364222c22616d6f756e74223a313030302c226964223a2231323334227d'::bytea, 86400000);
COMMIT;
