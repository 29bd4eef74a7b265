-- The same with the claim through the plpgsql function idempotency_acquire_generation (its INSERT ... ON CONFLICT DO UPDATE), as before the fast path.
SELECT gen_random_uuid()::text AS owner, gen_random_uuid()::text AS k, 'v2:' || md5(random()::text) || md5(random()::text) AS fp \gset
SELECT * FROM idempotency_acquire_generation('global', :k, :fp, 'POST', '/modes/light', :owner::uuid, NULL, 15000, 86400000, false);
BEGIN;
UPDATE idempotency_records t SET status = 'completed', response_status = 201, response_headers = '{"content-type":"application/json; charset=utf-8"}', response_body = '\x7b227265666572656e6365223a2261626364222c22616d6f756e74223a313030302c226964223a2231323334227d'::bytea, lease_expires_at = NULL, completed_at = now(), expires_at = CASE WHEN t.expires_at <= now() OR t.expires_at > now() + 86400000 * interval '1 millisecond' THEN now() + 86400000 * interval '1 millisecond' ELSE t.expires_at END WHERE t.scope = 'global' AND t.key = :k AND t.owner = :owner::uuid AND t.status = 'in_progress' RETURNING t.waiting, t.has_steps;
COMMIT;
