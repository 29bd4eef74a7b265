export {
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  IDEMPOTENT_BODY_OMITTED_HEADER,
  DEFAULT_ATTEMPT_TIMEOUT_MS,
} from './client.constants.js';
export {
  fetchFromHttpService,
  type AxiosHttpService,
} from './http-service-fetch.js';
export { IdempotentClient } from './idempotent-client.js';
export type {
  FetchFunction,
  IdempotentClientOptions,
  IdempotentRequestInit,
  IdempotentResult,
  ReplayableBody,
  RetryEvent,
} from './idempotent-client.options.js';
export {
  RetriesExhaustedError,
  type RetriesExhaustedDetails,
  type RetriesExhaustedReason,
} from './retries-exhausted.error.js';
export {
  RETRY_DEFAULTS,
  isNetworkError,
  isRetryableStatus,
  parseRetryAfter,
  resolveRetryOptions,
  retryDelay,
  type ResolvedRetryOptions,
  type RetryOptions,
} from './retry-policy.js';
