import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { DEFAULT_SCOPE } from './idempotency.constants.js';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from './idempotency.tokens.js';
import {
  resolveRouteOptions,
  type ResolvedIdempotencyOptions,
} from './idempotency.options.js';
import { validKey } from './core/idempotency-key.js';
import { IdempotencyConfigurationError } from './exceptions/idempotency-configuration.error.js';
import type { IdempotencyRunOptions } from './interfaces/idempotency-run-options.interface.js';
import { validScope, type Attempt } from './core/attempt.js';
import { boundFingerprint } from './core/request-fingerprint.js';
import { IdempotencyExecutor } from './core/idempotency.executor.js';
import { noTransactionError } from './core/no-transaction.js';

/**
 * The `manager` handed to `run()` with a store outside of the application's
 * database: a run that ignores it works, and any use of it throws the
 * configuration error.
 */
const missingManager = new Proxy({} as never, {
  get(_target, property) {
    // Awaiting or inspecting it must not throw.
    if (property === 'then' || typeof property === 'symbol') {
      return undefined;
    }
    throw noTransactionError(
      `The manager of IdempotencyService.run() (its \`${String(property)}\`)`,
    );
  },
});

/**
 * The name of a run, checked: stored with its record, where PostgreSQL
 * refuses a NUL character in text, so that every claim of the run would
 * fail (a 503 for ever, which says to retry).
 * @throws IdempotencyConfigurationError for a name with a NUL character.
 */
function validName(name: string | undefined): string {
  if (name === undefined) {
    return 'run';
  }
  if (name.includes('\0')) {
    throw new IdempotencyConfigurationError(
      `The name of IdempotencyService.run() is ${JSON.stringify(name)}: it has a NUL character (U+0000), which PostgreSQL cannot store.`,
      'Give a name without NUL characters, such as the name of the operation.',
    );
  }
  return name;
}

/** Fingerprint of runs that give none: every run with the key is the same. */
const ANY_RUN = '-';
/**
 * What a run's fingerprint is bound to: `run()` itself, not its `name`
 * (every run with the key is the same, whatever its name).
 */
const RUN_PARTS = { method: 'RUN', route: '', params: {} };

/**
 * Idempotency for any code path: queue workers, cron jobs, webhooks handled by
 * hand. Inject it and wrap the work in `run()`. `fn` gets the data
 * library's handle of the run's transaction: TypeORM's `EntityManager` by
 * default; with another adapter, annotate it with its entry's type
 * (`async (tx: PgTransaction) => ...`).
 *
 * @example
 * const receipt = await this.idempotency.run(
 *   { key: `invoice:${invoice.id}`, fingerprint: hash(invoice) },
 *   async (manager) => {
 *     await manager.insert(Charge, { invoiceId: invoice.id, amount: invoice.total });
 *     return { charged: invoice.total };
 *   },
 * );
 */
@Injectable()
export class IdempotencyService {
  constructor(
    private readonly executor: IdempotencyExecutor,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /**
   * Runs `fn` at most once per (scope, key), with the guarantees of
   * `@Idempotent()`: `fn` runs in a transaction that the application's
   * repositories share (and that `manager` is), and its result is stored in
   * the same transaction. (With a store other than PostgreSQL, `fn` runs in
   * no transaction: using `manager` throws an IdempotencyConfigurationError,
   * and the result is stored right after `fn` returns.) A duplicate gets the stored result without running
   * `fn`; a concurrent duplicate waits or is rejected per `concurrency`.
   *
   * The result must be a JSON value (it is returned as JSON to duplicates).
   *
   * @throws IdempotencyKeyInvalidException for a malformed key.
   * @throws IdempotencyConfigurationError for an invalid `scope`, or a
   * `name` with a NUL character.
   * @throws IdempotencyConflictException while the same key runs (`'reject'`,
   * or still after `waitTimeout` in `'wait'`): its message says so, and its
   * `retryAfterSeconds` when to try again.
   * @throws IdempotencyKeyReusedException for the key of another request.
   * @throws IdempotencyUnavailableException when the database is unreachable
   * (or the run passed its `transactionTimeout`): nothing took effect; retry
   * after its `retryAfterSeconds`.
   * @throws whatever `fn` throws; nothing is stored then, and a retry runs again.
   */
  async run<T, Transaction = EntityManager>(
    options: IdempotencyRunOptions,
    fn: (manager: Transaction) => T | Promise<T>,
  ): Promise<T> {
    const route = resolveRouteOptions(this.options, {
      ttl: options.ttl,
      concurrency: options.concurrency,
      waitTimeout: options.waitTimeout,
      transactionTimeout: options.transactionTimeout,
      isolationLevel: options.isolationLevel,
    });
    const attempt: Attempt = {
      started: Date.now(),
      scope:
        options.scope === undefined ? DEFAULT_SCOPE : validScope(options.scope),
      key: validKey(options.key, route.keyValidation, 'key', 'option'),
      method: RUN_PARTS.method,
      path: validName(options.name),
      // Bound to run(), as a route's fingerprint function's value is to
      // its route: the value alone would match an HTTP request under the
      // key whose fingerprint function returned the same, which would get
      // the run's result replayed. Runs of 0.6 and earlier stored the value
      // alone: a record of a run (any name) is still compared by it.
      fingerprint: boundFingerprint(RUN_PARTS, options.fingerprint ?? ANY_RUN),
      unboundFingerprint: {
        value: options.fingerprint ?? ANY_RUN,
        method: RUN_PARTS.method,
      },
    };
    const { result } = await this.executor.execute(
      attempt,
      route,
      async (transaction) =>
        fn(
          transaction.state === 'none'
            ? missingManager
            : (transaction.manager as Transaction),
        ),
    );
    return result;
  }
}
