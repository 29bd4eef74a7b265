/**
 * The lean floor's table and statements (lean.controller.ts): the
 * idempotency keys as a careful engineer would keep them by hand for this
 * one route, on a table of their own, in one place so that they change
 * together. The modes bench creates the table (modes.bench.ts) when it
 * runs the lean floor.
 *
 * What the table keeps, and why each column is there:
 *
 *   key               the client's Idempotency-Key, the primary key: the
 *                     claim is one INSERT ... ON CONFLICT on it. No scope,
 *                     method or path: one service, and the fingerprint
 *                     covers the route
 *   fingerprint       sha256 of the route and the body: the same key with
 *                     another request must get 422, not the stored response
 *   owner             the attempt holding the key: the completion is fenced
 *                     by it, so an attempt whose lease ran out (and whose key
 *                     another attempt took) rolls back instead of writing
 *   lease_expires_at  until when the attempt holds the key: a crashed
 *                     attempt's key is taken again after it, not after a day
 *   status            in_progress or completed: what a duplicate gets (409,
 *                     or the stored response)
 *   response_status,  the response, replayed to a duplicate byte for byte;
 *   response_body     no headers (the route only answers JSON)
 *   expires_at        when the key may be used again and its row deleted;
 *                     with an index, as the job that deletes expired rows
 *                     (`DELETE ... WHERE expires_at <= now()`, in batches)
 *                     needs one: else it scans a day's keys each time
 *
 * Left out, as a careful engineer would for this route: lease renewal
 * (the handler takes milliseconds, the lease 15 s), timestamps kept for
 * inspection, steps, a failed status (a failure releases the key).
 */
export const LEAN_TABLE = `
  CREATE TABLE IF NOT EXISTS bench_lean_keys (
    key text PRIMARY KEY,
    fingerprint text NOT NULL,
    owner uuid NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    status text NOT NULL CHECK (status IN ('in_progress', 'completed')),
    response_status smallint,
    response_body bytea,
    expires_at timestamptz NOT NULL
  );
  CREATE INDEX IF NOT EXISTS bench_lean_keys_expires_at
    ON bench_lean_keys (expires_at);
`;

/**
 * The claim, in autocommit: a new key, or one whose record expired, or
 * one whose attempt's lease ran out, is taken (one row); a key held or
 * completed is not (no row). Its commit does not wait for the WAL to reach
 * the disk (`synchronous_commit` off for its own transaction), as the
 * module's claim does not: losing it in a crash loses no write, since the
 * completion, which commits with the handler's writes, waits for the
 * flush of everything before it. Else the lean floor would pay a flush the
 * module does not.
 */
export const LEAN_CLAIM = `
  INSERT INTO bench_lean_keys AS k
    (key, fingerprint, owner, lease_expires_at, status, expires_at)
  SELECT $1, $2, $3, now() + interval '15 seconds', 'in_progress',
         now() + interval '24 hours'
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
  ON CONFLICT (key) DO UPDATE SET
    fingerprint = EXCLUDED.fingerprint, owner = EXCLUDED.owner,
    lease_expires_at = EXCLUDED.lease_expires_at, status = 'in_progress',
    response_status = NULL, response_body = NULL,
    expires_at = EXCLUDED.expires_at
  WHERE k.expires_at <= now()
     OR (k.status = 'in_progress' AND k.lease_expires_at <= now())`;

/** What holds a key the claim did not take: the duplicate's answer. */
export const LEAN_HOLDER = `
  SELECT status, fingerprint, response_status, response_body
    FROM bench_lean_keys WHERE key = $1`;

/**
 * The completion, in the handler's transaction, fenced by the attempt's
 * owner: no row, the key was taken from it, roll back.
 */
export const LEAN_COMPLETE = `
  UPDATE bench_lean_keys
     SET status = 'completed', response_status = $3, response_body = $4
   WHERE key = $1 AND owner = $2 AND status = 'in_progress'`;

/** After a failure: the key free again, unless it was taken meanwhile. */
export const LEAN_RELEASE = `
  DELETE FROM bench_lean_keys
   WHERE key = $1 AND owner = $2 AND status = 'in_progress'`;
