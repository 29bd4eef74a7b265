import type { ExecutionContext } from '@nestjs/common';

/**
 * A span of time: a number of milliseconds, or a string such as `'500ms'`,
 * `'30s'`, `'15m'`, `'24h'` or `'7d'`.
 */
export type IdempotencyDuration = number | string;

/**
 * What a duplicate does while the first request with the same key is still
 * executing.
 * - `'reject'`: answer at once with `409 Conflict` and a `Retry-After` header.
 * - `'wait'`: wait (at most `waitTimeout`) for the first request to finish,
 *   then replay its response; answer `409` if it is still running by then.
 */
export type IdempotencyConcurrencyMode = 'reject' | 'wait';

/**
 * Resolves the scope of a request: keys are unique per scope, and a record is
 * never visible to a request of another scope. Typically the authenticated
 * user or tenant.
 *
 * @example
 * scope: (context) => context.switchToHttp().getRequest().user.id
 */
export type IdempotencyScopeResolver = (
  context: ExecutionContext,
) => string | Promise<string>;

/**
 * Options of one decorated route or controller (`@Idempotent({ ... })`). Each
 * one overrides the module-wide option of the same name.
 */
export interface IdempotentOptions {
  /**
   * How long a completed record is kept and replayed. After that, the same key
   * executes the handler again.
   * @default '24h'
   */
  ttl?: IdempotencyDuration;
  /**
   * What a concurrent duplicate does while the first request executes.
   * @default 'reject'
   */
  concurrency?: IdempotencyConcurrencyMode;
  /**
   * In `'wait'` mode, how long a duplicate waits for the first request before
   * it gets `409`.
   * @default '10s'
   */
  waitTimeout?: IdempotencyDuration;
  /**
   * Upper bound on the transaction of a decorated handler. PostgreSQL aborts a
   * handler that runs (or idles inside its transaction) longer, which rolls its
   * writes back and frees the key.
   * @default '30s'
   */
  transactionTimeout?: IdempotencyDuration;
  /**
   * Scope resolver; keys are unique per scope.
   * @default a single global scope (`'global'`)
   */
  scope?: IdempotencyScopeResolver;
  /**
   * Whether a request without an idempotency key is refused with `400`. When
   * `false`, a keyless request runs the handler normally (still in one
   * transaction) and stores no record.
   * @default true
   */
  required?: boolean;
  /**
   * Seconds announced in the `Retry-After` header of a `409` answer.
   * @default 1
   */
  retryAfter?: number;
}

/**
 * Module-wide options of `IdempotencyModule.forRoot()` / `forRootAsync()`.
 */
export interface IdempotencyModuleOptions extends IdempotentOptions {
  /**
   * Name of the TypeORM DataSource to use, as given to
   * `TypeOrmModule.forRoot({ name })`. The module opens no connection of its
   * own: it borrows connections from this DataSource's pool.
   * @default the default DataSource
   */
  dataSource?: string;
  /**
   * Request header that carries the idempotency key.
   * @default 'Idempotency-Key'
   */
  headerName?: string;
}
