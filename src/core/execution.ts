import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import type {
  Completion,
  StepLease,
  StoredResponse,
} from '../interfaces/idempotency-store.interface.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import type { Attempt } from './attempt.js';
import type {
  AttemptTelemetry,
  OutgoingCall,
  OutgoingCallRecord,
} from './attempt-telemetry.js';
import {
  asksRetryLater,
  classifyFailure,
  isAbortedTransaction,
  LeaseLostError,
  transientAbort,
  type FailureKind,
} from './failures.js';
import { TransactionAbortedError } from './transaction.errors.js';
import type { ResolvedRouteOptions } from './executor.options.js';
import { handlerContexts, type HandlerContext } from './handler-context.js';
import type { LogKeys } from './log-key.js';
import type {
  HandlerTransaction,
  HandlerTransactions,
} from '../interfaces/handler-transaction.interface.js';
import {
  RecoveryPoints,
  type RecoveryHost,
  type RecoveryOwner,
} from './recovery-points.js';
import type { RunningLink } from './running-executions.js';
import { messageOf } from './error-message.js';
import { storedRedactedHeaders } from './stored-headers.js';
import {
  STORE_CALL_MIN_MS,
  storeCallMs,
  withinStoreTime,
} from './store-deadline.js';

/**
 * How long an answer waits for its claim's release. A release is one round
 * trip; a store that has not answered by then is unreachable, and its client
 * may hold the command until it reconnects (ioredis's defaults: through
 * twenty more reconnection attempts). The answer (a 503, or the handler's
 * error) goes out; the release is tried again until it lands or the lease
 * runs out, and a retry sent before that gets a 409 with `Retry-After`.
 */
const RELEASE_WAIT_MS = STORE_CALL_MIN_MS;

/**
 * @internal What an execution needs of the executor that started it: the
 * store, the handler's transactions, telemetry and events, and the
 * registry of the claims held by this instance.
 */
export interface ExecutionHost extends RecoveryHost {
  readonly transactions: HandlerTransactions;
  readonly telemetry: AttemptTelemetry;
  emit(
    type: IdempotencyEventType,
    attempt: Attempt,
    extra?: { status?: number; error?: unknown },
  ): void;
  /** Whether `execution` still holds its claim here (renewed, releasable). */
  holds(execution: Execution): boolean;
  /** `execution` no longer holds its claim here: it is no longer renewed. */
  forget(execution: Execution): void;
  /**
   * `execution`'s claim ended (completed, stored or released): it is
   * forgotten, the key's waiters here are woken, and, with `waiting` (one
   * waits elsewhere), those of the other instances.
   */
  ended(execution: Execution, waiting: boolean): void;
  /**
   * `execution`'s release failed: `release` (resolving to whether a
   * duplicate waits elsewhere) is tried again until it lands or the claim's
   * lease ran out, and the claim then ended as by {@link ended}.
   */
  retryRelease(execution: Execution, release: () => Promise<boolean>): void;
  /** How log lines show keys: a warning names a key only through it. */
  readonly logKeys: LogKeys;
}

/** Its execution's one timer went off (see `Execution.timeUp`). */
function timeUp(execution: Execution): void {
  execution.timeUp();
}

/** @internal How {@link Execution.fail} takes a failure. */
export interface FailOptions {
  /**
   * The error response may be stored (`storeError()`) or the claim
   * released (`release()`) by the caller: the claim is kept.
   */
  readonly keepClaim?: boolean;
  /**
   * The error is not the handler's but of the completion of its answer (a
   * `redact` hook that threw): answered with a 503 and reported as a
   * `failed` event, never as the handler's own error.
   */
  readonly ofModule?: boolean;
  /**
   * The handler's own error is taken as final beyond its answer (a
   * message's: counted, rejected, dead-lettered), as a stored error is:
   * checked as with `keepClaim`, the claim released all the same.
   */
  readonly final?: boolean;
}

/**
 * @internal One attempt that owns its key (or needs none): runs the handler
 * in its transaction until the deadline, then completes, fails or is
 * abandoned. It is also what the handler's code runs with (its
 * {@link HandlerContext}).
 */
export class Execution implements RunningLink, RecoveryOwner, HandlerContext {
  previousRunning: RunningLink | undefined = undefined;
  nextRunning: RunningLink | undefined = undefined;
  isRunning = false;
  /**
   * The handler's transaction, begun lazily by its first statement with
   * the PostgreSQL store; none with the others (only the hooks that run
   * after the completion).
   */
  readonly transaction: HandlerTransaction;
  /** When the attempt's time is up (epoch ms). */
  readonly deadline: number;
  private abandoned = false;
  private lost = false;
  private settled = false;
  /** Its steps and the keys of its downstream calls, once it has one. */
  private recovery: RecoveryPoints | undefined = undefined;
  /**
   * Its one timer, from the start of the handler until the attempt ends:
   * the deadline while the handler runs, then the wait for the response
   * (see {@link awaitResponse}).
   */
  private timer: NodeJS.Timeout | undefined = undefined;
  /** While the handler runs: rejects `run()` (with the deadline's 503). */
  private rejectRun: ((error: Error) => void) | undefined = undefined;
  /** Once the deadline went off: the abandonment, under way or done. */
  private abandoning: Promise<void> | undefined = undefined;
  /** While the response is awaited: what gives up on it, and when. */
  private onNoResponse: (() => void) | undefined = undefined;
  private noResponseAt = 0;

  constructor(
    private readonly host: ExecutionHost,
    readonly attempt: Attempt,
    readonly options: ResolvedRouteOptions,
    /** The store's handle of the claim; none for a keyless request. */
    readonly lease: StepLease | undefined,
    /** The key's generation, as the claim returned it. */
    private readonly generation = '',
  ) {
    this.deadline = attempt.started + options.transactionTimeoutMs;
    this.transaction = host.transactions.begin(
      this.deadline,
      options.isolationLevel,
    );
  }

  /** Whether a renewal found the claim taken over. */
  get isLeaseLost(): boolean {
    return this.lost;
  }

  /** Whether the attempt was abandoned at its deadline. */
  get isAbandoned(): boolean {
    return this.abandoned;
  }

  /** Whether the attempt ended (failed, completing or abandoned). */
  get isSettled(): boolean {
    return this.settled;
  }

  get scope(): string {
    return this.attempt.scope;
  }

  get key(): string | undefined {
    return this.attempt.key;
  }

  get retryAfter(): number {
    return this.options.retryAfter;
  }

  step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    return this.points().step(name, fn);
  }

  deriveKey(name: string): string {
    return this.points().deriveKey(name);
  }

  private points(): RecoveryPoints {
    this.recovery ??= new RecoveryPoints(this, this.host, this.generation);
    return this.recovery;
  }

  call<T>(
    call: OutgoingCall,
    fn: (record: OutgoingCallRecord) => Promise<T>,
  ): Promise<T> {
    return this.host.telemetry.call(this.attempt, call, fn);
  }

  /**
   * Runs the handler in its context and transaction, until the deadline:
   * then the attempt is abandoned (its claim released, its transaction
   * rolled back, its later statements refused) and `run` rejects with a 503.
   */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const { host, attempt, transaction } = this;
    const handler = host.telemetry.handler(attempt, () =>
      host.transactions.join(transaction, fn),
    );
    let result: T | undefined;
    try {
      // The handler's outcome, or the deadline's 503 once the attempt is
      // abandoned, whichever comes first.
      result = await new Promise<T>((resolve, reject) => {
        this.rejectRun = reject;
        this.timer = setTimeout(
          timeUp,
          Math.max(0, this.deadline - Date.now()),
          this,
        ).unref();
        handlerContexts.run(this, handler).then(resolve, reject);
      });
    } catch (error) {
      if (!this.abandoning) {
        throw error;
      }
    } finally {
      // The timer stays set, for the wait for the response (or is cleared
      // as the attempt ends).
      this.rejectRun = undefined;
    }
    if (!this.abandoning) {
      return result as T;
    }
    // The handler settled while being abandoned (the statement cancelled
    // made it fail): the answer is still the 503, once the key is free.
    await this.abandoning;
    throw new IdempotencyUnavailableException(this.options.retryAfter);
  }

  /**
   * After `run()`, while the transport waits for the response to complete
   * with: `noResponse` is called if none came `transactionTimeout` later
   * (the attempt should then fail, and give its connection back). The
   * handler's timer serves again.
   */
  awaitResponse(noResponse: () => void): void {
    const waitMs = this.options.transactionTimeoutMs;
    this.onNoResponse = noResponse;
    this.noResponseAt = Date.now() + waitMs;
    if (this.timer) {
      this.timer.refresh();
    } else {
      this.timer = setTimeout(timeUp, waitMs, this).unref();
    }
  }

  /**
   * @internal When its timer goes off: at the deadline while the handler
   * runs, the attempt is abandoned; while a response is awaited, and none
   * came in time, it is given up on.
   */
  timeUp(): void {
    const rejectRun = this.rejectRun;
    if (rejectRun) {
      this.rejectRun = undefined;
      this.abandoning = this.abandon();
      void this.abandoning.then(() =>
        rejectRun(new IdempotencyUnavailableException(this.options.retryAfter)),
      );
      return;
    }
    const noResponse = this.onNoResponse;
    if (!noResponse) {
      return;
    }
    const left = this.noResponseAt - Date.now();
    if (left > 0) {
      // Set for the handler's deadline, the timer went off earlier.
      this.timer = setTimeout(timeUp, left, this).unref();
      return;
    }
    this.stopTimer();
    noResponse();
  }

  /** The attempt ends (or waits for nothing more): its timer is cleared. */
  private stopTimer(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.onNoResponse = undefined;
  }

  /**
   * Completes with `response`, the answer the client gets: stored whole
   * for duplicates when its body fits `maxResponseSize` (as redacted, with
   * `redact`), else the record is marked not replayable (a duplicate is
   * refused), on every transport alike.
   * @throws IdempotencyUnavailableException as `complete()`.
   */
  completeWith(response: StoredResponse): Promise<void> {
    const { lease, options } = this;
    if (!lease) {
      return this.complete(undefined, response.status);
    }
    if (response.body.length <= options.maxResponseSize) {
      return options.redact
        ? this.completeRedacted(response)
        : this.complete({
            status: 'completed',
            response,
            ttlMs: options.ttlMs,
          });
    }
    return this.completeTooLarge(response);
  }

  /** Completes with a response whose body is over `maxResponseSize`. */
  private completeTooLarge(response: StoredResponse): Promise<void> {
    const { lease, attempt, options } = this;
    this.host.warn(
      `Response of ${attempt.method} ${attempt.path} (${response.body.length} bytes) exceeds maxResponseSize (${options.maxResponseSize}): ${this.host.logKeys.phrase(lease!.key)} is not replayable`,
    );
    return this.completeUnreplayable(response.status);
  }

  /** `completeWith` under a `redact` hook: what it returns is stored. */
  private async completeRedacted(response: StoredResponse): Promise<void> {
    const { options } = this;
    let stored: StoredResponse;
    try {
      stored = await redacted(response, options);
    } catch (error) {
      // Nothing unredacted is ever stored: the attempt fails instead, with
      // the module's 503, reported as such (not as the handler's error).
      await this.fail(error, { ofModule: true });
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    // What is stored is bounded, whatever the redaction made of it.
    if (stored.body.length > options.maxResponseSize) {
      return this.completeTooLarge(stored);
    }
    return this.complete({
      status: 'completed',
      response: stored,
      ttlMs: options.ttlMs,
    });
  }

  /**
   * Completes with a response that cannot be stored (a stream): a
   * duplicate is refused rather than run again.
   * @throws IdempotencyUnavailableException as `complete()`.
   */
  completeUnreplayable(status: number): Promise<void> {
    return this.complete(
      this.lease
        ? {
            status: 'not_replayable',
            response: { status },
            ttlMs: this.options.ttlMs,
          }
        : undefined,
      status,
    );
  }

  /**
   * Writes the response into the record (in the handler's transaction when
   * the store completes in it), fenced by the owner, and commits; then
   * wakes the key's waiters.
   * @throws IdempotencyUnavailableException when the lease was lost or the
   * commit failed: nothing of the attempt committed (or, for a failed
   * COMMIT, its outcome is unknown and a retry finds out).
   */
  private async complete(
    completion: Completion | undefined,
    /** The status answered, for a request without a key (no completion). */
    status?: number,
  ): Promise<void> {
    const { host, lease, attempt, options, transaction } = this;
    if (this.abandoned || this.settled) {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    this.settled = true;
    this.stopTimer();
    host.telemetry.committing(attempt);
    let waiting = false;
    try {
      // Work the handler did not await may begin its transaction now: the
      // completion then goes in it, or, when none began, nothing begins it
      // any more (it would commit apart from the record).
      await transaction.seal?.();
      if (lease && completion) {
        // A store outside of the database completes on its own, after the
        // handler: a crash before this line lets a retry run it again.
        const completing = host.store.complete(
          lease,
          completion,
          transaction.state === 'none' ? undefined : transaction,
        );
        // A completion of its own (a store outside of the database, or no
        // statement began the handler's transaction) is bounded by the
        // attempt's deadline: an unreachable store answers 503, never the
        // response, since the completion may not land. If it lands after
        // all, the release (fenced to a claim still in progress) changes
        // nothing and the retry gets the replay; if it does not, the
        // release frees the key and the retry runs. In the handler's
        // transaction, the attempt's deadline abandons the transaction.
        const alone =
          transaction.state === 'none' || transaction.state === 'idle';
        const write = await (alone
          ? withinStoreTime(
              completing,
              storeCallMs(this.deadline),
              'completion',
            )
          : this.beforeDeadline(completing));
        if (!write.fenced) {
          throw new LeaseLostError();
        }
        waiting = write.waiting;
      }
      await transaction.commit();
    } catch (error) {
      if (this.abandoning) {
        // Abandoned at the deadline: rolled back there.
        await this.abandoning;
      } else {
        await transaction.rollback(error);
      }
      // The handler's own doing, which its retry repeats: its error, not
      // a 503 that asks for that retry. (One a retry may not meet, a
      // deadlock, a serialization failure or a timeout the handler
      // caught, keeps its 503.) Told before the release, which ends the
      // attempt's telemetry with it.
      const aborted =
        !this.abandoned &&
        isAbortedTransaction(error) &&
        transientAbort(transaction.abortedBy) === undefined;
      if (aborted) {
        host.telemetry.failed(attempt, 'handler');
      }
      await this.releaseAfterSteps();
      if (aborted) {
        throw new TransactionAbortedError();
      }
      const lost = error instanceof LeaseLostError;
      host.emit(
        lost ? 'lease-lost' : this.abandoned ? 'timeout' : 'failed',
        attempt,
        { status: 503, error },
      );
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    host.ended(this, waiting);
    host.emit('executed', attempt, {
      status: completion?.response.status ?? status,
    });
  }

  /**
   * What `write`, the completion in the handler's transaction, resolves
   * to, unless the attempt's deadline comes first (a round trip's time at
   * least after it was sent): nothing on the server bounds the statement
   * (a lock it waits on, held by another session), so the transaction is
   * then abandoned as a hung handler's is (the statement cancelled, the
   * transaction rolled back), and the completion fails.
   * @throws the cancelled statement's error, or the deadline's once it
   *   passed.
   */
  private async beforeDeadline<T>(write: Promise<T>): Promise<T> {
    const ms = storeCallMs(this.deadline);
    this.timer = setTimeout(() => {
      this.abandoned = true;
      this.abandoning = this.transaction.abandon();
    }, ms).unref();
    try {
      const written = await write;
      if (this.abandoned) {
        // Written as the deadline went off: rolled back all the same.
        throw new Error(
          `The completion ran past the deadline (transactionTimeout, ${this.options.transactionTimeoutMs} ms)`,
        );
      }
      return written;
    } finally {
      this.stopTimer();
    }
  }

  /**
   * Ends an attempt whose handler failed: rolls its transaction back, and
   * releases the claim (unless `keepClaim`: the error response may be stored
   * by `storeError()` or released by `release()`).
   * @returns how the failure is answered. With `keepClaim` or `final`, the
   * handler's own error is answered with a 503 (and its claim released)
   * when the handler's transaction tells of a failure a retry may not meet
   * (see {@link transientAbort}), as a success is at its completion.
   */
  async fail(
    error: unknown,
    { keepClaim = false, ofModule = false, final = false }: FailOptions = {},
  ): Promise<FailureKind> {
    if (this.settled) {
      // Abandoned at the deadline, the handler may fail before the deadline's
      // own rejection (its statement cancelled, no place for a transaction):
      // the answer is still the deadline's 503.
      return this.abandoned ? 'timeout' : 'handler';
    }
    this.settled = true;
    if (!keepClaim) {
      this.stopTimer();
    }
    const { host, attempt } = this;
    // An error answer that may be stored is checked against an end sent by
    // hand that only the server can tell of (chained to another
    // transaction): what the handler wrote before it may have committed,
    // and its error must not be stored as the key's outcome (503).
    const lost =
      this.transaction.state === 'lost' ||
      (keepClaim &&
        (await this.transaction.endedUnderneath?.().catch(() => true)) ===
          true);
    const { abortedBy } = this.transaction;
    const rolledBack = await this.transaction.rollback(error);
    // Its steps still under way (siblings of the one that failed, in a
    // `Promise.all`) keep the key: freed now, a retry would run them again
    // beside them. Their results are saved as usual, for the retry.
    const stepsSettled = await this.stepsSettled();
    let kind: FailureKind =
      this.abandoned || !stepsSettled
        ? 'timeout'
        : classifyFailure(error, { lost, rolledBack });
    if (ofModule && kind === 'handler') {
      kind = 'unavailable';
    }
    let cause = stepsSettled ? error : stepsUnderWay(this.options);
    if ((keepClaim || final) && kind === 'handler') {
      // An error answer that may be stored (or a message's failure, which
      // may be counted, rejected or dead-lettered) is checked against what failed
      // of the handler's statements, as a success is at its completion: a
      // deadlock, a serialization failure or a timeout that the handler
      // caught and answered with its own error (a 4xx) may not meet its
      // retry, so that answer must not stand for the key until it expires.
      // The client gets a 503, and the retry runs.
      const transient = transientAbort(abortedBy);
      if (transient) {
        kind = transient;
        cause = abortedBy;
      }
    }
    host.telemetry.failed(attempt, kind);
    // Either is answered with a 503 (`IdempotencyUnavailableException`).
    if (kind === 'timeout') {
      host.emit('timeout', attempt, { status: 503, error: cause });
    } else if (kind === 'unavailable') {
      host.emit(
        error instanceof LeaseLostError || this.lost ? 'lease-lost' : 'failed',
        attempt,
        { status: 503, error: cause },
      );
    }
    if (!stepsSettled) {
      this.leaveToLease();
    } else if (!keepClaim || kind !== 'handler') {
      await this.release();
    }
    return kind;
  }

  /**
   * Waits until no step of the attempt is under way, at most until its
   * deadline: whether none is (nor was: a lost claim is no longer the
   * attempt's to keep).
   */
  private stepsSettled(): Promise<boolean> {
    return this.recovery && !this.lost
      ? this.recovery.settled(this.deadline)
      : Promise.resolve(true);
  }

  /**
   * Releases the claim once no step of the attempt is under way; at the
   * deadline with one still under way, leaves it to its lease instead.
   */
  private async releaseAfterSteps(): Promise<void> {
    if (await this.stepsSettled()) {
      await this.release();
    } else {
      this.leaveToLease();
    }
  }

  /**
   * Gives the claim up without releasing it, with a step of the attempt
   * still under way at its deadline: it is no longer renewed, and lapses
   * with its lease, which renewals never carried past the deadline. A
   * retry then takes the key over and resumes after the steps saved,
   * deriving the same downstream keys (the key stays bound to its
   * request). The late step's result is saved if its store still takes it
   * from this claim (PostgreSQL and the memory store do until a retry took
   * the key over; Redis fences by the lease too), for the retry to read.
   */
  private leaveToLease(): void {
    const { host, lease, attempt } = this;
    this.stopTimer();
    host.telemetry.released(attempt);
    if (!lease || !host.holds(this)) {
      return;
    }
    host.forget(this);
    host.warn(
      `${attempt.method} ${attempt.path}: a step of a failed attempt still ran at its deadline (transactionTimeout, ${this.options.transactionTimeoutMs} ms): ${host.logKeys.phrase(lease.key)} is not released but left to its lease. Its retry resumes after the steps saved, and runs that one again under the same derived keys unless its result was saved by then.`,
    );
  }

  /**
   * Whether the error policy (`storeErrors`) stores the error answer of
   * `status`; a policy that throws stores nothing (warned): the key is
   * released, and the client still gets its answer.
   */
  storesError(status: number, error: unknown): boolean {
    const policy = this.options.storeErrors;
    if (!policy) {
      return false;
    }
    try {
      return Boolean(policy(status, error));
    } catch (failure) {
      this.host.warn(
        `The storeErrors policy of ${this.attempt.method} ${this.attempt.path} threw (${messageOf(failure)}): the error answer is not stored`,
      );
      return false;
    }
  }

  /**
   * Stores an error response in the record (the error policy), fenced by the
   * owner, in a statement of its own. One that asks the client to come back
   * later (a 408, 425 or 429, a `Retry-After`, the module's own 409 or 503:
   * see {@link asksRetryLater}) releases the claim instead, whatever the
   * policy said: the retry runs the handler. Never rejects.
   * @param error what the handler threw.
   */
  async storeError(response: StoredResponse, error?: unknown): Promise<void> {
    const { host, lease, attempt, options } = this;
    this.stopTimer();
    if (!lease) {
      return;
    }
    if (asksRetryLater(response.status, response.headers, error)) {
      await this.release();
      return;
    }
    try {
      const stored = await redacted(response, options);
      // What is stored is bounded, whatever the redaction made of it: a
      // larger one is not stored, and the key is released.
      const write =
        stored.body.length > options.maxResponseSize
          ? { fenced: false, waiting: false }
          : await withinStoreTime(
              host.store.complete(
                lease,
                { status: 'failed', response: stored, ttlMs: options.ttlMs },
                undefined,
              ),
              storeCallMs(this.deadline),
              'stored error',
            );
      if (write.fenced) {
        host.ended(this, write.waiting);
        host.emit('stored-error', attempt, { status: response.status });
        return;
      }
    } catch (error) {
      // The client still gets its error; a retry runs again.
      host.warn(`Could not store an error response: ${messageOf(error)}`);
    }
    await this.release();
  }

  /**
   * Gives the claim up, so that the next attempt runs at once. Never throws.
   * Resolves once the store has answered, or after {@link RELEASE_WAIT_MS},
   * when the release is tried again in the background.
   */
  async release(): Promise<void> {
    const { host, lease } = this;
    this.stopTimer();
    host.telemetry.released(this.attempt);
    if (!lease || !host.holds(this)) {
      return;
    }
    // Out of the running set first: a second release finds it gone.
    host.forget(this);
    const release = async () =>
      (await host.store.release(lease, this.recovery?.derived ?? false))
        .waiting;
    const released = (async () => {
      let waiting = false;
      try {
        // Bounded, so that the answer never waits for a release the
        // store's client holds; its retries (`LeaseRenewals.retryRelease`)
        // are bounded there.
        waiting = await withinStoreTime(release(), RELEASE_WAIT_MS, 'release');
      } catch (error) {
        host.warn(
          `Releasing ${host.logKeys.phrase(lease.key)} failed: it is tried again until it lands or the claim's lease runs out (${messageOf(error)})`,
        );
        host.retryRelease(this, release);
      }
      host.ended(this, waiting);
    })();
    await released;
  }

  /** Called when a renewal found the claim taken over. */
  leaseLost(): void {
    this.lost = true;
    this.host.forget(this);
  }

  /** At the deadline: abandons the attempt and frees its key. */
  private async abandon(): Promise<void> {
    if (this.settled) {
      return;
    }
    this.abandoned = true;
    this.settled = true;
    await this.transaction.abandon();
    this.host.emit('timeout', this.attempt, {
      status: 503,
      error: new Error(
        `The handler ran past its deadline (transactionTimeout, ${this.options.transactionTimeoutMs} ms)`,
      ),
    });
    await this.release();
  }
}

/** Why a failed attempt answers 503: a step of its still ran at its deadline. */
function stepsUnderWay(options: ResolvedRouteOptions): Error {
  return new Error(
    `A step of the failed attempt still ran at its deadline (transactionTimeout, ${options.transactionTimeoutMs} ms)`,
  );
}

/**
 * What is stored of `response`: the `redact` hook's answer, given copies
 * (the caller's own answer stays as it is), or `response` itself.
 */
async function redacted(
  response: StoredResponse,
  options: ResolvedRouteOptions,
): Promise<StoredResponse> {
  const { redact } = options;
  if (!redact) {
    return response;
  }
  const { headers, body } = await redact({
    status: response.status,
    headers: { ...response.headers },
    body: Buffer.from(response.body),
  });
  return {
    status: response.status,
    headers: storedRedactedHeaders(
      headers,
      response.headers,
      options.expiresHeader,
    ),
    body: Buffer.isBuffer(body) ? body : Buffer.from(String(body)),
  };
}
