/**
 * Name of the table that holds idempotency records, exported by
 * `nestjs-idempotency/migrations`.
 *
 * The shipped migrations create it under this name. Never rename the table once
 * records are in use: a renamed table means every stored key is forgotten and
 * every retry runs its handler again.
 */
export const IDEMPOTENCY_TABLE_NAME = 'idempotency_records';

/**
 * Name of the table that holds the results of completed steps (recovery
 * points) of requests in progress, exported by
 * `nestjs-idempotency/migrations`. Never rename it once in use.
 */
export const IDEMPOTENCY_STEPS_TABLE_NAME = 'idempotency_steps';

/**
 * @internal The setting that marks a handler's transaction as the one the
 * module began (`SET LOCAL`, for that transaction alone), which its
 * completion checks.
 */
export const TRANSACTION_MARK_SETTING = 'idempotency.transaction';

/**
 * @internal Metadata key of the scope a handler's records are kept in by
 * default, named from its class and method (an integration's, such as
 * `@IdempotentWebhook()`'s receivers): a function of the class and the
 * method's name. The explorer refuses two handlers of one such name at
 * bootstrap: two classes of the same name would share their records.
 */
export const DEFAULT_SCOPE_NAME_METADATA = 'idempotency:default-scope-name';

/**
 * @internal Metadata key under which `@Idempotent()` stores its route
 * options; read only by the module itself, never exported by the package.
 */
export const IDEMPOTENT_METADATA = 'idempotency:route-options';

/** Scope used when no `scope` resolver is configured. */
export const DEFAULT_SCOPE = 'global';

export { UNSAFE_REPLAY_HEADERS } from './core/stored-headers.js';
