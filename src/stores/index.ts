/*
 * The `nestjs-idempotency/store` entry: the contract a store implements, for
 * the authors of stores, and the one of the PostgreSQL store's data-library
 * adapters, for their authors; the scope a store is given for requests
 * without a `scope` resolver, the headers a stored response never holds, and
 * the type of the `store` option, for code that hands a store to the module
 * (a store's own helpers, a test's). An application that only configures a
 * store, or injects it, needs the main entry alone (`IdempotencyStore` is
 * there too).
 */
export {
  DEFAULT_SCOPE,
  UNSAFE_REPLAY_HEADERS,
} from '../idempotency.constants.js';
export type { IdempotencyStoreOption } from '../interfaces/idempotency-store-option.interface.js';
export {
  IdempotencyStore,
  type AbandonedKey,
  type ClaimOutcome,
  type ClaimRequest,
  type Completion,
  type FailureKey,
  type FencedWrite,
  type ForgottenBatch,
  type Lease,
  type RecordInspection,
  type RecordPage,
  type RecordQuery,
  type RecordState,
  type RecordStatus,
  type RecordSummary,
  type Renewal,
  type ResetOutcome,
  type StepLease,
  type StoredRecord,
  type StoredResponse,
} from '../interfaces/idempotency-store.interface.js';
export { IdempotencyStepTooLargeError } from '../exceptions/idempotency-step-too-large.error.js';
export type {
  HandlerTransaction,
  HandlerTransactionState,
  HandlerTransactions,
  TransactionListener,
  TransactionOutcome,
} from '../interfaces/handler-transaction.interface.js';
export type {
  PostgresAdapter,
  PostgresAdapterOptions,
  PostgresClient,
  PostgresConnection,
  PostgresDataAccess,
  PostgresQuery,
  PostgresResult,
  PostgresSession,
  PostgresTransaction,
} from '../interfaces/postgres-adapter.interface.js';
