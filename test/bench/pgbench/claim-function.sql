-- The claim as the store sends it: idempotency_acquire_generation (plpgsql), a new key.
SELECT gen_random_uuid()::text AS owner, md5(random()::text) AS k \gset
SELECT * FROM idempotency_acquire_generation('s', :k, 'fp0123456789abcdef', 'POST', '/modes/light', :owner::uuid, NULL, 30000, 86400000, false);
