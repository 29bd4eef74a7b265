import {
  Inject,
  Injectable,
  Logger,
  type BeforeApplicationShutdown,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import {
  IdempotencyStore,
  type ClaimOutcome,
  type ClaimRequest,
  type Lease,
  type StoredRecord,
  type StoredResponse,
} from '../interfaces/idempotency-store.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { IdempotencyConflictException } from '../exceptions/idempotency-conflict.exception.js';
import { IdempotencyKeyReusedException } from '../exceptions/idempotency-key-reused.exception.js';
import { IdempotencyNotReplayableException } from '../exceptions/idempotency-not-replayable.exception.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import {
  isSameRequest,
  isUnboundRecordOf,
  mayBeUnboundRecord,
  type Attempt,
} from './attempt.js';
import { AttemptTelemetry } from './attempt-telemetry.js';
import {
  Execution,
  type ExecutionHost,
  type FailOptions,
} from './execution.js';
import { ExecutorEvents } from './executor.events.js';
import {
  ExecutorOptions,
  type ResolvedRouteOptions,
} from './executor.options.js';
import {
  HandlerTransactions,
  type HandlerTransaction,
} from '../interfaces/handler-transaction.interface.js';
import { NO_HANDLER_TRANSACTIONS } from './no-transaction.js';
import { isIdempotencyStore } from './is-idempotency-store.js';
import { LogKeys } from './log-key.js';
import { LeaseRenewals } from './lease-renewals.js';
import { Waiters } from './waiters.js';
import { sealedStore } from './record-sealing.js';
import { messageOf } from './error-message.js';
import {
  STORE_CALL_MIN_MS,
  StoreTimeoutError,
  storeCallMs,
  withinStoreTime,
} from './store-deadline.js';

/**
 * How often a waiter looks at the key again when notifications cannot reach
 * it (no presence session). With them, it looks again when notified, when
 * the owner's lease would run out, or when the presence session drops.
 */
const POLL_MS = 250;
/**
 * How many times a claim is tried again when the record it found changed
 * before it was read back (see `isUnboundRecord`), before a 503.
 */
const MAX_REREADS = 3;

/** Of a duplicate: the record to replay, or the attempt to run. */
export type Beginning =
  { readonly replay: StoredRecord } | { readonly execution: Execution };

/**
 * @internal The one owner of the request sequence: claim (or wait), replay or
 * refuse, run, fenced completion, release, classification of failures,
 * events. The transports are thin adapters around it; each attempt that
 * owns its key is an {@link Execution}, which reaches back only through
 * the narrow {@link ExecutionHost} this class implements.
 */
@Injectable()
export class IdempotencyExecutor
  implements
    ExecutionHost,
    OnModuleInit,
    BeforeApplicationShutdown,
    OnApplicationShutdown
{
  private readonly logger = new Logger('Idempotency');
  private readonly waiters = new Waiters();
  /** Attempts of this instance holding a claim, renewed together. */
  private readonly renewals: LeaseRenewals;
  /** Subjects already warned of (see `warn`). */
  private readonly warned = new Set<string>();
  /** How log lines show keys (telemetry's `keys` option). */
  readonly logKeys: LogKeys;

  constructor(
    @Inject(IdempotencyStore) readonly store: IdempotencyStore,
    @Inject(ExecutorEvents) private readonly events: ExecutorEvents,
    @Inject(ExecutorOptions) private readonly options: ExecutorOptions,
    @Inject(AttemptTelemetry) readonly telemetry: AttemptTelemetry,
    /** The handler's transactions: TypeORM's with the PostgreSQL store. */
    @Inject(HandlerTransactions)
    private readonly handlerTransactions: HandlerTransactions,
  ) {
    this.logKeys = new LogKeys(options);
    if (options.sealing && isIdempotencyStore(store)) {
      this.store = sealedStore(store, options.sealing, (message, lease) =>
        this.logger.warn(`${message}: ${this.logKeys.phrase(lease.key)}`),
      );
    }
    this.renewals = new LeaseRenewals(store, options.leaseMs, this.logger);
  }

  /**
   * Where handlers run: in a transaction that the store completes in (the
   * PostgreSQL store), or in none.
   */
  get transactions(): HandlerTransactions {
    return this.store.completesInTransaction
      ? this.handlerTransactions
      : NO_HANDLER_TRANSACTIONS;
  }

  onModuleInit(): void {
    if (!isIdempotencyStore(this.store)) {
      throw new IdempotencyConfigurationError(
        'The `store` of IdempotencyModule did not provide an idempotency store: it lacks some of the methods of the IdempotencyStore interface.',
        'Return an IdempotencyStore (a MemoryIdempotencyStore, a Redis or DynamoDB store) from the `useFactory` of `store`, or point `useExisting` at one.',
      );
    }
    if (
      this.store.completesInTransaction &&
      this.handlerTransactions === NO_HANDLER_TRANSACTIONS
    ) {
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
    this.renewals.start();
  }

  /**
   * Tries the releases that failed and wait for their retry once more, while
   * the store's connections are still open (Nest runs this hook before it
   * closes the HTTP server and before any `onApplicationShutdown`, where a
   * data library closes its pool): a key whose release failed just before
   * a shutdown is free at once, not a lease later.
   */
  beforeApplicationShutdown(): Promise<void> {
    return this.renewals.releasePending();
  }

  /**
   * Stops renewing, and tries the releases still pending a last time
   * (those of requests that ended while the server closed), each bounded.
   */
  onApplicationShutdown(): Promise<void> {
    return this.renewals.stop();
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
    // Claims again when a record read to compare it changed meanwhile.
    let rereads = MAX_REREADS;
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
      // Bounded by the attempt's deadline, as its handler would be (at
      // least a round trip's time): an unreachable store answers the
      // request with a 503 then, whatever its client does with the command.
      const claiming = this.store.claim(request);
      try {
        outcome = await withinStoreTime(
          claiming,
          storeCallMs(attempt.started + options.transactionTimeoutMs),
          'claim',
        );
      } catch (error) {
        // Whether the claim landed is unknown (a late answer, a connection
        // lost after the store wrote it): released by its owner, which
        // frees nothing but this attempt's own claim; a claim that failed
        // is released before the 503, so that the retry finds the key free.
        const releasing = this.releaseLateClaim(claiming, request);
        if (!(error instanceof StoreTimeoutError)) {
          await releasing;
        }
        this.emit('failed', attempt, { status: 503, error });
        throw new IdempotencyUnavailableException(options.retryAfter);
      }
      if (outcome.state === 'claimed') {
        const execution = new Execution(
          this,
          attempt,
          options,
          outcome.lease ?? request,
          outcome.generation,
        );
        this.renewals.add(execution);
        return { execution };
      }
      const found =
        outcome.state === 'finished'
          ? outcome.record.fingerprint
          : outcome.fingerprint;
      const same = found === undefined || isSameRequest(attempt, found);
      const unbound = same
        ? false
        : await this.isUnboundRecord(attempt, options, found);
      if (unbound === 'changed') {
        if (--rereads < 0) {
          this.emit('failed', attempt, {
            status: 503,
            error: new Error(
              `The record of the key changed each time it was read back after its claim (${MAX_REREADS + 1} times)`,
            ),
          });
          throw new IdempotencyUnavailableException(options.retryAfter);
        }
        continue;
      }
      if (outcome.state === 'finished') {
        // A record of 0.6 of the same request: replayed as its own.
        return {
          replay: unbound
            ? { ...outcome.record, fingerprint: attempt.fingerprint }
            : outcome.record,
        };
      }
      if (!same && !unbound) {
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
   * Whether the record of `attempt`'s key, whose fingerprint the claim
   * found to be `fingerprint`, is a record of 0.6 of the same request
   * (see `mayBeUnboundRecord`): read back for its method and path, which the
   * claim does not return. `'changed'` when the record read is no longer
   * the one the claim found. Never with a store that cannot read a record.
   * @throws IdempotencyUnavailableException when the store is unreachable.
   */
  private async isUnboundRecord(
    attempt: Attempt,
    options: ResolvedRouteOptions,
    fingerprint: string,
  ): Promise<boolean | 'changed'> {
    const { store } = this;
    if (
      !mayBeUnboundRecord(attempt, fingerprint) ||
      store.inspectRecord === undefined
    ) {
      return false;
    }
    let record;
    try {
      record = await withinStoreTime(
        store.inspectRecord(attempt.scope, attempt.key!, false),
        storeCallMs(attempt.started + options.transactionTimeoutMs),
        'claim',
      );
    } catch (error) {
      this.emit('failed', attempt, { status: 503, error });
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    return record === undefined || record.fingerprint !== fingerprint
      ? 'changed'
      : isUnboundRecordOf(attempt, record);
  }

  /**
   * Releases the claim of a request answered with a 503 because its claim
   * failed, should it have landed all the same: one the store's client
   * sent once the store was back (it did not answer in time), or one the
   * store wrote before its answer was lost with the connection. The key is
   * free for the retry at once, not a lease later. The release is fenced by
   * the claim's owner, this attempt's own: it frees no other claim. One
   * that fails is tried again until the claim's lease runs out (see
   * `LeaseRenewals.retryRelease`).
   * @returns once the release was tried (bounded), or found needless.
   */
  private releaseLateClaim(
    claiming: Promise<ClaimOutcome>,
    request: ClaimRequest,
  ): Promise<void> {
    const releaseClaim = async (lease: Lease) => {
      const release = async () => {
        await this.store.release(lease, false);
      };
      // The first try bounded here, its retries in `retryRelease`.
      await withinStoreTime(release(), STORE_CALL_MIN_MS, 'release').catch(() =>
        this.renewals.retryRelease(release, Date.now() + request.leaseMs),
      );
    };
    return claiming.then(
      (outcome) =>
        outcome.state === 'claimed'
          ? releaseClaim(outcome.lease ?? request)
          : undefined,
      // Failed: it may have been written before its answer was lost.
      () => releaseClaim(request),
    );
  }

  /**
   * The whole sequence for a JSON result (messages and programmatic runs):
   * the stored result for a duplicate, else `fn`'s, stored with it.
   * @param failure.final whether the handler's own error is taken as final
   * beyond its answer (a message's: counted for `maxAttempts`, rejected,
   * handed to `deadLetter`), as a stored error is: then one that the
   * handler's transaction tells a retry may not meet (a deadlock, a
   * serialization failure, a timeout the handler caught and answered with
   * its own error) is the 503 it is (see `Execution.fail`).
   */
  async execute<T>(
    attempt: Attempt,
    options: ResolvedRouteOptions,
    fn: (transaction: HandlerTransaction) => Promise<T>,
    failure: Pick<FailOptions, 'final'> = {},
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
    } catch (error) {
      const kind = await execution.fail(error, failure);
      throw kind === 'handler'
        ? error
        : new IdempotencyUnavailableException(options.retryAfter);
    }
    try {
      json = result === undefined ? undefined : JSON.stringify(result);
    } catch (error) {
      // A result JSON cannot hold (a BigInt, a cycle) is the handler's
      // error. Where the store completes in the handler's transaction,
      // nothing of it commits, and the key is free for the retry; on any
      // other store its effects stay, and a retry must not run it again:
      // the key's duplicates are refused as not replayable.
      if (this.store.completesInTransaction) {
        const kind = await execution.fail(error);
        throw kind === 'handler'
          ? error
          : new IdempotencyUnavailableException(options.retryAfter);
      }
      await execution.completeUnreplayable(jsonResponse(undefined).status);
      throw error;
    }
    await execution.completeWith(jsonResponse(json));
    return { result, replayed: false };
  }

  /**
   * Counts a failed attempt of `attempt`'s key (its handler threw) in the
   * store, where it outlives the claim's release.
   * Bounded as the attempt's other calls of the store (until its
   * deadline, a round trip's time at least): a store that does not answer
   * leaves the message to come back, not unsettled for as long as its
   * client waits.
   * @returns the key's failed attempts so far, this one included.
   * @throws IdempotencyConfigurationError when the store cannot count.
   * @throws the store's error when it is unreachable, or StoreTimeoutError.
   */
  async countFailure(
    attempt: Attempt,
    options: ResolvedRouteOptions,
  ): Promise<number> {
    const { key } = attempt;
    if (key === undefined) {
      return 0;
    }
    if (!this.store.countFailure) {
      throw new IdempotencyConfigurationError(
        'The idempotency store cannot count failed attempts, which `maxAttempts` needs.',
        'Implement `countFailure()` in the store, or leave `maxAttempts` out.',
      );
    }
    return withinStoreTime(
      this.store.countFailure({ scope: attempt.scope, key }, options.ttlMs),
      storeCallMs(attempt.started + options.transactionTimeoutMs),
      'count of failed attempts',
    );
  }

  /**
   * Forgets the failed attempts of `attempt`'s key that the store counted,
   * if it can (see `IdempotencyStore.forgetFailures`), within a round
   * trip's time: the message it was counted for is settled then, whether
   * or not the store answered.
   * @throws the store's error when it is unreachable, or StoreTimeoutError.
   */
  async forgetFailures(attempt: Attempt): Promise<void> {
    const { key } = attempt;
    const forgotten =
      key === undefined
        ? undefined
        : this.store.forgetFailures?.({ scope: attempt.scope, key });
    if (forgotten) {
      await withinStoreTime(
        forgotten,
        STORE_CALL_MIN_MS,
        'forgetting of failed attempts',
      );
    }
  }

  /**
   * The one answer to a duplicate of a finished request, on every
   * transport: its stored response, when the record was written for the
   * same request (fingerprint) and holds one.
   * @throws IdempotencyKeyReusedException for another request's key.
   * @throws IdempotencyNotReplayableException when nothing was stored.
   */
  replay(attempt: Attempt, record: StoredRecord): StoredResponse {
    this.refuseOtherRequest(attempt, record);
    if (record.status === 'not_replayable') {
      this.emit('not-replayable', attempt, { status: 422 });
      throw new IdempotencyNotReplayableException(attempt.key ?? '');
    }
    this.emit('replayed', attempt, { status: record.response.status });
    return record.response;
  }

  /**
   * The answer to a duplicate of a finished HTTP request, which has a status
   * of its own to give: as `replay()`, but a record whose response was not
   * stored gives its status with no headers and an empty body
   * (`bodyOmitted`) instead of a refusal.
   * @throws IdempotencyKeyReusedException for another request's key.
   */
  replayOrOmit(
    attempt: Attempt,
    record: StoredRecord,
  ): { readonly response: StoredResponse; readonly bodyOmitted: boolean } {
    if (record.status !== 'not_replayable') {
      return { response: this.replay(attempt, record), bodyOmitted: false };
    }
    this.refuseOtherRequest(attempt, record);
    const { status } = record.response;
    this.emit('not-replayable', attempt, { status });
    return {
      response: { status, headers: {}, body: Buffer.alloc(0) },
      bodyOmitted: true,
    };
  }

  /** @throws IdempotencyKeyReusedException unless `record` is `attempt`'s. */
  private refuseOtherRequest(attempt: Attempt, record: StoredRecord): void {
    if (!isSameRequest(attempt, record.fingerprint)) {
      this.emit('mismatch', attempt, { status: 422 });
      throw new IdempotencyKeyReusedException(attempt.key ?? '');
    }
  }

  /**
   * The stored result of a duplicate of a finished message, job or run (see
   * `replay()`).
   */
  storedResult(attempt: Attempt, record: StoredRecord): unknown {
    const { body } = this.replay(attempt, record);
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

  retryRelease(execution: Execution, release: () => Promise<boolean>): void {
    this.renewals.retryRelease(async () => {
      const waiting = await release();
      this.ended(execution, waiting);
    }, Date.now() + this.options.leaseMs);
  }

  holds(execution: Execution): boolean {
    return this.renewals.has(execution);
  }

  forget(execution: Execution): void {
    this.renewals.delete(execution);
  }

  /**
   * NOTIFY serialises the commits of every transaction that sends one: it
   * goes after the commit, in a statement of its own, and only for a key
   * that has a waiter.
   */
  ended(execution: Execution, waiting: boolean): void {
    this.renewals.delete(execution);
    const { lease } = execution;
    if (!lease) {
      return;
    }
    this.waiters.wake(lease.scope, lease.key);
    if (waiting) {
      this.store.notify([lease]).catch((error: unknown) => {
        this.logger.warn(
          `Notifying the waiters of a key failed (they poll): ${messageOf(error)}`,
        );
      });
    }
  }

  warn(message: string, once?: string): void {
    if (once !== undefined) {
      if (this.warned.has(once)) {
        return;
      }
      this.warned.add(once);
    }
    this.logger.warn(message);
  }
}

/** @internal The stored response of a JSON result (`undefined`: no body). */
export function jsonResponse(
  json: string | undefined,
  headers: Record<string, string> = {},
): StoredResponse {
  return {
    status: 200,
    headers,
    body: json === undefined ? Buffer.alloc(0) : Buffer.from(json),
  };
}
