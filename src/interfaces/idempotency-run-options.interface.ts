import type {
  IdempotencyConcurrencyMode,
  IdempotencyDuration,
  IdempotencyIsolationLevel,
} from './idempotency-options.interface.js';

/**
 * Options of `IdempotencyService.run()`. Durations and the concurrency mode
 * default to the module's options.
 */
export interface IdempotencyRunOptions {
  /** The idempotency key, validated like a header key (`keyValidation`). */
  key: string;
  /**
   * Scope of the key: a non-empty string of well-formed Unicode, without
   * NUL characters, of at most 1024 bytes of UTF-8 (another value throws an
   * `IdempotencyConfigurationError`).
   * @default 'global'
   */
  scope?: string;
  /**
   * What makes two runs with the same key "the same request", e.g. a hash of
   * the job's payload. A run with the same key and another fingerprint throws
   * `IdempotencyKeyReusedException`, and so does an HTTP request or a
   * message under the key (in the same scope), whatever its fingerprint:
   * the record keeps it bound to `run()` (a hash of it, as `inspect`
   * shows).
   * @default none: any run with the key is the same request
   */
  fingerprint?: string;
  /**
   * Name of the operation, stored with the record (for inspection); one
   * with a NUL character, which PostgreSQL cannot store, throws an
   * `IdempotencyConfigurationError`.
   * @default 'run'
   */
  name?: string;
  /** How long the result is kept and returned to duplicates. @default module `ttl` */
  ttl?: IdempotencyDuration;
  /**
   * `'reject'` throws `IdempotencyConflictException` (with the delay to
   * retry after, `retryAfterSeconds`) while the same key runs; `'wait'`
   * waits for it, and throws it only after `waitTimeout`.
   * @default module `concurrency`
   */
  concurrency?: IdempotencyConcurrencyMode;
  /** In `'wait'` mode, how long to wait. @default module `waitTimeout` */
  waitTimeout?: IdempotencyDuration;
  /** Upper bound on the run's transaction. @default module `transactionTimeout` */
  transactionTimeout?: IdempotencyDuration;
  /** Isolation level of the run's transaction. @default module `isolationLevel` */
  isolationLevel?: IdempotencyIsolationLevel;
}
