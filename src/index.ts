export { IdempotencyModule } from './idempotency.module.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyContext } from './idempotency.context.js';
export { IdempotencyCollector } from './idempotency.collector.js';
export { IdempotencyService } from './idempotency.service.js';
export { IdempotencyPrivacy } from './privacy/idempotency-privacy.service.js';
export { UnreadableRecordError } from './privacy/idempotency-key-ring.js';
export type {
  IdempotencyEncryptionOptions,
  IdempotencyRedactedResponse,
  IdempotencyRedactor,
  IdempotencyStoredResponse,
} from './interfaces/idempotency-privacy.interface.js';
export {
  IdempotencyAdmin,
  type IdempotencyForgetOptions,
  type IdempotencyForgetResult,
  type IdempotencyListQuery,
  type IdempotencyRecordView,
} from './admin/idempotency.admin.js';
export type {
  IdempotencyReencryptOptions,
  IdempotencyReencryptResult,
  IdempotencyResponseView,
} from './admin/sealed-records.js';
export {
  IdempotencyAdminError,
  IdempotencyAdminInputError,
  IdempotencyAdminUnsupportedError,
  IdempotencyLeaseHeldError,
  IdempotencyRecordNotFoundError,
} from './exceptions/idempotency-admin.errors.js';
export {
  IdempotencyKafka,
  type IdempotentKafkaOptions,
  type IdempotentKafkaPayload,
} from './messages/idempotency.kafka.js';
export type {
  KafkaMessageLike,
  KafkaOffsetCommitter,
} from './messages/kafka.transport.js';
export {
  IdempotencyStore,
  type RecordInspection,
  type RecordPage,
  type RecordState,
  type RecordSummary,
} from './interfaces/idempotency-store.interface.js';
export type { IdempotencyRunOptions } from './interfaces/idempotency-run-options.interface.js';
export type {
  IdempotencyConcurrencyMode,
  IdempotencyDuration,
  IdempotencyErrorPolicy,
  IdempotencyFingerprintFields,
  IdempotencyFingerprintFunction,
  IdempotencyIsolationLevel,
  IdempotencyKeyResolver,
  IdempotencyKeyValidation,
  IdempotencyReplayHeaders,
  IdempotencyScopeResolver,
  IdempotentOptions,
} from './interfaces/idempotency-options.interface.js';
export type {
  IdempotencyDeadLetter,
  IdempotencyDeadLetterHandler,
} from './interfaces/idempotency-dead-letter.interface.js';
export type {
  IdempotencyGcOptions,
  IdempotencyModuleOptions,
  IdempotencyTelemetryKeys,
  IdempotencyTelemetryOptions,
} from './interfaces/idempotency-module-options.interface.js';
export type {
  IdempotencyEvent,
  IdempotencyEventType,
} from './interfaces/idempotency-event.interface.js';
export {
  IdempotencyHttpException,
  type IdempotencyProblem,
} from './exceptions/idempotency-http.exception.js';
export {
  IdempotencyKeyMissingException,
  type IdempotencyKeyLocation,
} from './exceptions/idempotency-key-missing.exception.js';
export { IdempotencyKeyInvalidException } from './exceptions/idempotency-key-invalid.exception.js';
export { IdempotencyConflictException } from './exceptions/idempotency-conflict.exception.js';
export { IdempotencyKeyReusedException } from './exceptions/idempotency-key-reused.exception.js';
export { IdempotencyUnavailableException } from './exceptions/idempotency-unavailable.exception.js';
export { IdempotencyNotReplayableException } from './exceptions/idempotency-not-replayable.exception.js';
export { IdempotencyBodyUnreadableException } from './exceptions/idempotency-body-unreadable.exception.js';
export { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
export { TransactionAbortedError } from './core/transaction.errors.js';
export { StepResultError } from './core/recovery-points.js';
export { IdempotencyStepResultTooLargeException } from './exceptions/idempotency-step-result-too-large.exception.js';
export { IdempotencyStepResultNotJsonException } from './exceptions/idempotency-step-result-not-json.exception.js';
export { IdempotencyStepTooLargeError } from './exceptions/idempotency-step-too-large.error.js';
export {
  IdempotencyDownstreamRefusedException,
  type IdempotencyDownstreamAnswer,
} from './exceptions/idempotency-downstream-refused.exception.js';
export { IdempotencyDownstreamUnavailableException } from './exceptions/idempotency-downstream-unavailable.exception.js';
export type {
  IdempotentFetchBody,
  IdempotentFetchFunction,
  IdempotentFetchInit,
  IdempotentFetchOptions,
} from './interfaces/idempotent-fetch.interface.js';
export { IDEMPOTENCY_GRAPHQL_CODES } from './graphql/graphql-refusals.js';
export {
  MemoryIdempotencyStore,
  type MemoryIdempotencyStoreOptions,
} from './stores/memory/memory.store.js';
export {
  IdempotentWebhook,
  WebhookDelivery,
} from './webhooks/idempotent-webhook.decorator.js';
export { hmacSha256Matches } from './webhooks/webhook-signatures.js';
export {
  IdempotencyWebhookRefusedException,
  type WebhookRefusal,
} from './webhooks/webhook-refused.exception.js';
export type {
  IdempotentWebhookOptions,
  VerifiedWebhook,
  WebhookIdentity,
  WebhookPresetName,
  WebhookProvider,
  WebhookRequest,
  WebhookSecrets,
} from './webhooks/webhook-options.interface.js';
