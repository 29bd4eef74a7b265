import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import type {
  ResolvedIdempotencyOptions,
  ResolvedRouteOptions,
} from '../idempotency.options.js';
import { IdempotencyEvents } from '../idempotency.events.js';
import { IdempotencyTelemetry } from '../telemetry/idempotency.telemetry.js';
import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { IdempotencyConflictException } from '../exceptions/idempotency-conflict.exception.js';
import { IdempotencyKeyReusedException } from '../exceptions/idempotency-key-reused.exception.js';
import { IdempotencyNotReplayableException } from '../exceptions/idempotency-not-replayable.exception.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import { isLegacyFingerprint } from './request-fingerprint.js';
import { IdempotencyDataSource } from '../typeorm/idempotency-data-source.js';
import type { LazyTransaction } from '../typeorm/lazy-transaction.js';
import {
  ambientTransactions,
  type AmbientTransaction,
  type HandlerRequest,
} from '../typeorm/ambient-transaction.js';
import { isIdempotencyStore } from '../stores/store.providers.js';
import { StoreTransaction } from './store-transaction.js';
import type { Attempt } from './attempt.js';
import {
  IdempotencyStore,
  type ClaimRequest,
  type StepLease,
  type Completion,
  type StoredRecord,
  type StoredResponse,
} from '../interfaces/idempotency-store.interface.js';
import { ownStatement } from './own-statement.js';
import {
  classifyFailure,
  LeaseLostError,
  type FailureKind,
} from './failures.js';
import { Waiters } from './waiters.js';
import { RunningExecutions, type RunningLink } from './running-executions.js';

/**
 * How often a waiter looks at the key again when notifications cannot reach
 * it (no presence session). With them, it looks again when notified, when
 * the owner's lease would run out, or when the presence session drops.
 */
const POLL_MS = 250;

/** Of a duplicate: the record to replay, or the attempt to run. */
export type Beginning =
  { readonly replay: StoredRecord } | { readonly execution: Execution };

/**
 * @internal The one owner of the request sequence: claim (or wait), replay or
 * run, fenced completion, release, classification of failures, events. HTTP
 * requests, messages and `IdempotencyService.run()` are thin adapters around
 * it.
 */
@Injectable()
export class IdempotencyExecutor
  implements OnModuleInit, OnApplicationShutdown
{
  readonly logger = new Logger('Idempotency');
  readonly waiters = new Waiters();
  /** Attempts of this instance holding a claim, renewed together. */
  readonly running = new RunningExecutions<Execution>();
  /** Routes whose step already warned of running inside a transaction. */
  readonly warnedSteps = new Set<string>();
  private renewal: NodeJS.Timeout | undefined;
  private renewing = false;

  constructor(
    @Inject(IdempotencyStore) readonly store: IdempotencyStore,
    private readonly events: IdempotencyEvents,
    @Inject(IDEMPOTENCY_RESOLVED_OPTIONS)
    readonly options: ResolvedIdempotencyOptions,
    readonly telemetry: IdempotencyTelemetry,
    /** The TypeORM side: with the PostgreSQL store only. */
    @Optional() readonly source?: IdempotencyDataSource,
  ) {}

  /**
   * Whether handlers run in a transaction of the application's DataSource
   * that the store completes in (the PostgreSQL store), or in none.
   */
  get inTransaction(): boolean {
    return this.source !== undefined && this.store.completesInTransaction;
  }

  onModuleInit(): void {
    if (!isIdempotencyStore(this.store)) {
      throw new IdempotencyConfigurationError(
        'The `store` of IdempotencyModule did not provide an idempotency store: it lacks some of the methods of the IdempotencyStore interface.',
        'Return an IdempotencyStore (a MemoryIdempotencyStore, a Redis or DynamoDB store) from the `useFactory` of `store`, or point `useExisting` at one.',
      );
    }
    if (this.store.completesInTransaction && !this.source) {
      throw new IdempotencyConfigurationError(
        "The `store` of IdempotencyModule completes in the handler's transaction, which only the built-in PostgreSQL store can.",
        'Omit `store` to use the PostgreSQL store on the TypeORM DataSource.',
        'Or give a store that completes after the handler (`completesInTransaction: false`).',
      );
    }
    this.watchStore();
  }

  private watchStore(): void {
    this.store.watch((scope, key) =>
      scope === undefined || key === undefined
        ? this.waiters.wakeAll()
        : this.waiters.wake(scope, key),
    );
    this.renewal ??= setInterval(
      () => void this.renew(),
      Math.max(100, Math.floor(this.options.leaseMs / 3)),
    ).unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.renewal);
    this.renewal = undefined;
  }

  /**
   * Claims the key of an attempt: the record to replay, or an execution that
   * owns the key (or, for a keyless request, needs none).
   * @throws IdempotencyConflictException while the same request runs.
   * @throws IdempotencyKeyReusedException while another request runs.
   * @throws IdempotencyUnavailableException when the store is unreachable.
   */
  begin(attempt: Attempt, options: ResolvedRouteOptions): Promise<Beginning> {
    return this.telemetry.claim(attempt, () => this.claim(attempt, options));
  }

  /** The sequence of `begin()`: claims the key, or waits and claims again. */
  private async claim(
    attempt: Attempt,
    options: ResolvedRouteOptions,
  ): Promise<Beginning> {
    const { key } = attempt;
    if (key === undefined) {
      return { execution: new Execution(this, attempt, options, undefined) };
    }
    const owner = randomUUID();
    const wait = options.concurrency === 'wait';
    const waitUntil = Date.now() + options.waitTimeoutMs;
    for (;;) {
      let outcome;
      const request: ClaimRequest = {
        scope: attempt.scope,
        key,
        owner,
        fingerprint: attempt.fingerprint,
        method: attempt.method,
        path: attempt.path,
        leaseMs: Math.min(
          this.options.leaseMs,
          Math.max(
            1,
            attempt.started + options.transactionTimeoutMs - Date.now(),
          ),
        ),
        ttlMs: options.ttlMs,
        wait,
      };
      try {
        outcome = await this.store.claim(request);
      } catch (error) {
        this.emit('failed', attempt, { error });
        throw new IdempotencyUnavailableException(options.retryAfter);
      }
      if (outcome.state === 'claimed') {
        const execution = new Execution(
          this,
          attempt,
          options,
          outcome.lease ?? request,
        );
        this.running.add(execution);
        return { execution };
      }
      if (outcome.state === 'finished') {
        return { replay: outcome.record };
      }
      if (
        outcome.fingerprint !== undefined &&
        outcome.fingerprint !== attempt.fingerprint &&
        !(
          attempt.legacyFingerprint &&
          isLegacyFingerprint(outcome.fingerprint) &&
          outcome.fingerprint === attempt.legacyFingerprint()
        )
      ) {
        this.emit('mismatch', attempt, { status: 422 });
        throw new IdempotencyKeyReusedException(key);
      }
      const left = waitUntil - Date.now();
      if (!wait || left <= 0) {
        this.emit('conflict', attempt, { status: 409 });
        throw new IdempotencyConflictException(
          key,
          Math.min(options.retryAfter, Math.ceil(outcome.leaseMs / 1000)),
        );
      }
      await this.waiters.wait(
        attempt.scope,
        key,
        Math.min(
          left,
          // A lease running out frees the key: look again then.
          outcome.leaseMs + 5,
          this.store.watching ? Infinity : POLL_MS,
        ),
      );
    }
  }

  /**
   * The whole sequence for a JSON result (messages and programmatic runs):
   * the stored result for a duplicate, else `fn`'s, stored with it.
   */
  async execute<T>(
    attempt: Attempt,
    options: ResolvedRouteOptions,
    fn: (transaction: LazyTransaction | StoreTransaction) => Promise<T>,
  ): Promise<{ readonly result: T; readonly replayed: boolean }> {
    const beginning = await this.begin(attempt, options);
    if ('replay' in beginning) {
      return {
        result: this.storedResult(attempt, beginning.replay) as T,
        replayed: true,
      };
    }
    const { execution } = beginning;
    let result: T;
    let json: string | undefined;
    try {
      result = await execution.run(() => fn(execution.transaction));
      // A result JSON cannot hold (a BigInt, a cycle) is the handler's
      // error: nothing commits, and the key is free for the retry.
      json = result === undefined ? undefined : JSON.stringify(result);
    } catch (error) {
      const kind = await execution.fail(error);
      throw kind === 'handler'
        ? error
        : new IdempotencyUnavailableException(options.retryAfter);
    }
    await execution.complete({
      status: 'completed',
      response: {
        status: 200,
        headers: {},
        body: json === undefined ? Buffer.alloc(0) : Buffer.from(json),
      },
      ttlMs: options.ttlMs,
    });
    return { result, replayed: false };
  }

  /**
   * Whether a finished record was written for the same request as
   * `attempt`: the same fingerprint, or, for a record written by 0.1.0, the
   * same fingerprint by 0.1.0's formula.
   */
  sameRequest(record: StoredRecord, attempt: Attempt): boolean {
    return (
      record.fingerprint === attempt.fingerprint ||
      (attempt.legacyFingerprint !== undefined &&
        isLegacyFingerprint(record.fingerprint) &&
        record.fingerprint === attempt.legacyFingerprint())
    );
  }

  /**
   * The stored result for a duplicate of a finished message or run.
   * @throws IdempotencyKeyReusedException for another request's key.
   * @throws IdempotencyNotReplayableException when nothing was stored.
   */
  storedResult(attempt: Attempt, record: StoredRecord): unknown {
    const key = attempt.key ?? '';
    if (!this.sameRequest(record, attempt)) {
      this.emit('mismatch', attempt);
      throw new IdempotencyKeyReusedException(key);
    }
    if (record.status === 'not_replayable') {
      this.emit('not-replayable', attempt);
      throw new IdempotencyNotReplayableException(key);
    }
    this.emit('replayed', attempt);
    const { body } = record.response;
    return body.length === 0
      ? undefined
      : (JSON.parse(body.toString('utf8')) as unknown);
  }

  emit(
    type: IdempotencyEventType,
    attempt: Attempt,
    extra: { status?: number; error?: unknown } = {},
  ): void {
    this.telemetry.event(attempt, type, extra.error);
    if (!this.events.wanted(type)) {
      return;
    }
    this.events.emit({
      type,
      scope: attempt.scope,
      key: attempt.key,
      method: attempt.method,
      path: attempt.path,
      durationMs: Date.now() - attempt.started,
      ...extra,
    });
  }

  /** Renews the leases of every attempt running here, in one statement. */
  private async renew(): Promise<void> {
    if (this.renewing || this.running.size === 0) {
      return;
    }
    this.renewing = true;
    const now = Date.now();
    const executions = this.running.toArray();
    try {
      const held = await this.store.renew(
        executions.map(({ lease, deadline }) => ({
          scope: lease!.scope,
          key: lease!.key,
          owner: lease!.owner,
          // Never past the attempt's deadline.
          durationMs: Math.max(
            0,
            Math.min(this.options.leaseMs, deadline - now),
          ),
        })),
      );
      for (const execution of executions) {
        if (this.running.has(execution) && !held.has(execution.lease!.owner)) {
          execution.leaseLost();
        }
      }
    } catch (error) {
      this.logger.warn(
        `Renewing ${executions.length} lease(s) failed, retrying in ${Math.floor(this.options.leaseMs / 3)} ms: ${(error as Error).message}`,
      );
    } finally {
      this.renewing = false;
    }
  }
}

/**
 * @internal One attempt that owns its key (or needs none): runs the handler
 * in its lazy transaction until the deadline, then completes, fails or is
 * abandoned.
 */
export class Execution implements RunningLink {
  previousRunning: RunningLink | undefined = undefined;
  nextRunning: RunningLink | undefined = undefined;
  isRunning = false;
  /**
   * The handler's lazy transaction on the DataSource (PostgreSQL store), or
   * none: only the hooks that run after the completion (other stores).
   */
  readonly transaction: LazyTransaction | StoreTransaction;
  readonly deadline: number;
  private abandoned = false;
  private lost = false;
  private settled = false;

  constructor(
    private readonly executor: IdempotencyExecutor,
    readonly attempt: Attempt,
    readonly options: ResolvedRouteOptions,
    /** The store's handle of the claim; none for a keyless request. */
    readonly lease: StepLease | undefined,
  ) {
    this.deadline = attempt.started + options.transactionTimeoutMs;
    this.transaction =
      executor.source && executor.inTransaction
        ? executor.source.transaction(this.deadline, options.isolationLevel)
        : new StoreTransaction();
  }

  /**
   * Runs the handler with the lazy transaction as its ambient one, until the
   * deadline: then the attempt is abandoned (its claim released, its
   * transaction rolled back, its later statements refused) and `run`
   * rejects with a 503.
   */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    let abandoning: Promise<void> | undefined;
    let result: T | undefined;
    try {
      const { context, handler } = this.ambient(fn);
      // The handler's outcome, or the deadline's 503 once the attempt is
      // abandoned, whichever comes first.
      result = await new Promise<T>((resolve, reject) => {
        timer = setTimeout(
          () => {
            abandoning = this.abandon();
            void abandoning.then(() =>
              reject(
                new IdempotencyUnavailableException(this.options.retryAfter),
              ),
            );
          },
          Math.max(0, this.deadline - Date.now()),
        ).unref();
        ambientTransactions
          .run(context, this.executor.telemetry.handler(this.attempt, handler))
          .then(resolve, reject);
      });
    } catch (error) {
      if (!abandoning) {
        throw error;
      }
    } finally {
      clearTimeout(timer);
    }
    if (!abandoning) {
      return result as T;
    }
    // The handler settled while being abandoned (the statement cancelled
    // made it fail): the answer is still the 503, once the key is free.
    await abandoning;
    throw new IdempotencyUnavailableException(this.options.retryAfter);
  }

  /**
   * What the handler runs with: its lazy transaction on the DataSource,
   * which `fn` joins (PostgreSQL store), or no DataSource and only the
   * hooks of a store that completes after it.
   */
  private ambient<T>(fn: () => Promise<T>): {
    readonly context: AmbientTransaction;
    readonly handler: () => Promise<T>;
  } {
    const request: HandlerRequest = {
      scope: this.attempt.scope,
      key: this.attempt.key,
      step: (name, step) => this.step(name, step),
    };
    const { transaction } = this;
    const { source } = this.executor;
    if (transaction instanceof StoreTransaction || !source) {
      return {
        context: {
          ...request,
          dataSource: undefined,
          transaction: transaction as StoreTransaction,
        },
        handler: fn,
      };
    }
    return {
      context: { ...request, dataSource: source.dataSource, transaction },
      handler: () => source.join(transaction, fn),
    };
  }

  /**
   * Writes the response into the record in the handler's transaction, fenced
   * by the owner, and commits; then wakes the key's waiters.
   * @throws IdempotencyUnavailableException when the lease was lost or the
   * commit failed: nothing of the attempt committed (or, for a failed
   * COMMIT, its outcome is unknown and a retry finds out).
   */
  async complete(completion: Completion | undefined): Promise<void> {
    const { executor, lease, attempt, options } = this;
    if (this.abandoned || this.settled) {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    this.settled = true;
    executor.telemetry.committing(attempt);
    let waiting = false;
    try {
      if (lease && completion) {
        // A store outside of the database completes on its own, after the
        // handler: a crash before this line lets a retry run it again.
        const write = await executor.store.complete(
          lease,
          completion,
          this.transaction instanceof StoreTransaction
            ? undefined
            : this.transaction,
        );
        if (!write.fenced) {
          throw new LeaseLostError(lease.key);
        }
        waiting = write.waiting;
      }
      await this.transaction.commit();
    } catch (error) {
      await this.transaction.rollback('ended', error);
      await this.release();
      const lost = error instanceof LeaseLostError;
      executor.emit(lost ? 'lease-lost' : 'failed', attempt, { error });
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    this.finished(waiting);
    executor.emit('executed', attempt, {
      status: completion?.response.status,
    });
  }

  /**
   * Ends an attempt whose handler failed: rolls its transaction back, and
   * releases the claim (unless `keepClaim`: the error response may be stored
   * by `storeError()` or released by `release()`).
   * @returns how the failure is answered.
   */
  async fail(error: unknown, keepClaim = false): Promise<FailureKind> {
    if (this.settled) {
      // Abandoned at the deadline, the handler may fail before the deadline's
      // own rejection (its statement cancelled, no place for a transaction):
      // the answer is still the deadline's 503.
      return this.abandoned ? 'timeout' : 'handler';
    }
    this.settled = true;
    const lost = this.transaction.isLost;
    const rolledBack = await this.transaction.rollback('ended', error);
    const kind = this.abandoned
      ? 'timeout'
      : classifyFailure(error, { lost, rolledBack });
    this.executor.telemetry.failed(this.attempt, kind);
    if (kind === 'timeout') {
      this.executor.emit('timeout', this.attempt, { error });
    } else if (kind === 'unavailable') {
      this.executor.emit(
        error instanceof LeaseLostError || this.lost ? 'lease-lost' : 'failed',
        this.attempt,
        { error },
      );
    }
    if (!keepClaim || kind !== 'handler') {
      await this.release();
    }
    return kind;
  }

  /**
   * Stores an error response in the record (the error policy), fenced by the
   * owner, in a statement of its own.
   */
  async storeError(response: StoredResponse): Promise<void> {
    const { executor, lease, attempt, options } = this;
    if (!lease) {
      return;
    }
    try {
      const write = await executor.store.complete(
        lease,
        { status: 'failed', response, ttlMs: options.ttlMs },
        undefined,
      );
      if (write.fenced) {
        this.finished(write.waiting);
        executor.emit('stored-error', attempt, { status: response.status });
        return;
      }
    } catch (error) {
      // The client still gets its error; a retry runs again.
      executor.logger.error(
        `Could not store an error response: ${(error as Error).message}`,
      );
    }
    await this.release();
  }

  /** Gives the claim up, so that the next attempt runs at once. Never throws. */
  async release(): Promise<void> {
    const { executor, lease } = this;
    executor.telemetry.released(this.attempt);
    if (!lease || !executor.running.has(this)) {
      return;
    }
    // Out of the running set first: a second release finds it gone.
    executor.running.delete(this);
    let waiting = false;
    try {
      ({ waiting } = await executor.store.release(lease));
    } catch (error) {
      executor.logger.warn(
        `Releasing key ${JSON.stringify(lease.key)} failed: the next attempt claims it when its lease runs out (${(error as Error).message})`,
      );
    }
    this.finished(waiting);
  }

  /** Called when a renewal found the claim taken over. */
  leaseLost(): void {
    this.lost = true;
    this.executor.running.delete(this);
  }

  /**
   * A recovery point (see `IdempotencyContext.step`): the stored result of
   * step `name` of this key, else `fn`'s, committed at once, fenced by the
   * owner.
   */
  private async step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const { executor, lease, attempt, options } = this;
    if (!lease) {
      throw new IdempotencyConfigurationError(
        'IdempotencyContext.step() needs an idempotency key, and this request has none.',
        'Require a key on this route (the default), or derive one with the `key` option.',
      );
    }
    if (typeof name !== 'string' || name.length === 0) {
      throw new IdempotencyConfigurationError(
        `Invalid step name: ${JSON.stringify(name)}.`,
        'Give every step a non-empty name, unique within the handler.',
      );
    }
    const stored = await ownStatement(() =>
      executor.store.readStep(lease, name),
    );
    if (stored) {
      return stored.result as T;
    }
    if (this.transaction.isOpen) {
      const route = `${attempt.method} ${attempt.path} step ${JSON.stringify(name)}`;
      if (!executor.warnedSteps.has(route)) {
        executor.warnedSteps.add(route);
        executor.logger.warn(
          `${route} runs while the handler's transaction is open: its connection is held during the step. Run steps before the handler's first database statement.`,
        );
      }
    }
    // A step of an attempt that already lost its transaction or its claim
    // would start an effect for an attempt that cannot commit (and, its
    // claim lost, without reading the new owner's steps): 503 instead.
    if (this.lost) {
      throw new LeaseLostError(lease.key);
    }
    if (this.transaction.isLost) {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    const result = await fn();
    if (this.abandoned) {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    const saved = await ownStatement(() =>
      executor.store.saveStep(lease, name, result, options.ttlMs),
    );
    if (!saved) {
      throw new LeaseLostError(lease.key);
    }
    return (result ?? null) as T;
  }

  /** At the deadline: abandons the attempt and frees its key. */
  private async abandon(): Promise<void> {
    if (this.settled) {
      return;
    }
    this.abandoned = true;
    this.settled = true;
    await this.transaction.abandon();
    this.executor.emit('timeout', this.attempt, {
      error: new Error(
        `The handler ran past its deadline (transactionTimeout, ${this.options.transactionTimeoutMs} ms)`,
      ),
    });
    await this.release();
  }

  /**
   * The claim ended (completed, stored or released): wakes the key's waiters
   * in this process, and, when `waiting` tells that one waits elsewhere, on
   * the other instances. NOTIFY serialises the commits of every transaction
   * that sends one: it goes after the commit, in a statement of its own, and
   * only for a key that has a waiter.
   */
  private finished(waiting = false): void {
    const { executor, lease } = this;
    executor.running.delete(this);
    if (!lease) {
      return;
    }
    executor.waiters.wake(lease.scope, lease.key);
    if (waiting) {
      executor.store.notify([lease]).catch((error: unknown) => {
        executor.logger.warn(
          `Notifying the waiters of a key failed (they poll): ${(error as Error).message}`,
        );
      });
    }
  }
}
