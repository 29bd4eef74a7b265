/**
 * Request header that carries the idempotency key: the default of the
 * module's `headerName` and of the client's.
 */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';

/**
 * Response header set to `true` on a replayed response: the stored final
 * outcome of the operation, whatever its status, never retried (the
 * default of the module's `replayHeaderName`).
 */
export const IDEMPOTENT_REPLAYED_HEADER = 'Idempotent-Replayed';

/**
 * Response header set to `true` on a replay whose original body was not
 * stored (a stream, a body over `maxResponseSize`): the original status
 * and headers, with an empty body on purpose.
 */
export const IDEMPOTENT_BODY_OMITTED_HEADER = 'Idempotent-Body-Omitted';

/** Default of the client's `attemptTimeoutMs`. */
export const DEFAULT_ATTEMPT_TIMEOUT_MS = 10_000;
