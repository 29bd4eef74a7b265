/**
 * Request header that carries the idempotency key (default of the client's
 * `headerName`), as the module reads it.
 */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';

/**
 * Response header set to `true` on a replayed response: the stored final
 * outcome of the operation, whatever its status, never retried.
 */
export const IDEMPOTENT_REPLAYED_HEADER = 'Idempotent-Replayed';

/** Default of the client's `attemptTimeoutMs`. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 10_000;
