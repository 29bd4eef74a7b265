import type {
  IdempotencyStore,
  StepLease,
} from '../interfaces/idempotency-store.interface.js';
import type { HandlerTransaction } from '../interfaces/handler-transaction.interface.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import { messageOf } from './error-message.js';
import { IdempotencyUnavailableException } from '../exceptions/idempotency-unavailable.exception.js';
import type { Attempt } from './attempt.js';
import { derivedKey } from './derived-key.js';
import type { ResolvedRouteOptions } from './executor.options.js';
import { LeaseLostError } from './failures.js';
import { ownStatement } from './own-statement.js';
import { checkStepName, duplicateStepError } from './step-name.js';
import { storeCallMs, withinStoreTime } from './store-deadline.js';
import {
  storedStep,
  storedStepValue,
  unkeptStepValue,
  type UnkeptStep,
} from './stored-step.js';
import { IdempotencyStepTooLargeError } from '../exceptions/idempotency-step-too-large.error.js';
import { IdempotencyStepResultTooLargeException } from '../exceptions/idempotency-step-result-too-large.exception.js';
import { IdempotencyStepResultNotJsonException } from '../exceptions/idempotency-step-result-not-json.exception.js';

/**
 * @internal What the recovery points of an attempt read of its execution
 * as they run: its claim, its transaction, and whether it may go on.
 */
export interface RecoveryOwner {
  readonly attempt: Attempt;
  readonly options: ResolvedRouteOptions;
  readonly transaction: HandlerTransaction;
  /** The store's handle of the claim; none for a keyless request. */
  readonly lease: StepLease | undefined;
  /** Whether a renewal found the claim taken over. */
  readonly isLeaseLost: boolean;
  /** Whether the attempt was abandoned at its deadline. */
  readonly isAbandoned: boolean;
  /** Whether the attempt ended (failed, completing or abandoned). */
  readonly isSettled: boolean;
}

/** @internal What the recovery points of an attempt need of the executor. */
export interface RecoveryHost {
  readonly store: IdempotencyStore;
  /** Logs a warning; with `once`, only the first time for that subject. */
  warn(message: string, once?: string): void;
}

/**
 * @internal The recovery points of an attempt that owns its key: its steps
 * (`IdempotencyContext.step`), each read and saved by a statement of its
 * own fenced by the claim's owner, and the keys of its downstream calls
 * (`IdempotencyContext.deriveKey`).
 */
export class RecoveryPoints {
  /** Whether a key was derived for a downstream call (see {@link deriveKey}). */
  private keysDerived = false;
  /**
   * The steps under way, from their read to their save: the attempt's
   * failure waits for them before it frees the key (see {@link settled}).
   */
  private readonly running = new Set<Promise<unknown>>();
  /**
   * The names of the steps called in this execution: each once (a retry,
   * another execution, reads back what an earlier one saved).
   */
  private readonly names = new Set<string>();

  constructor(
    private readonly owner: RecoveryOwner,
    private readonly host: RecoveryHost,
    /** The key's generation, as the claim returned it. */
    private readonly generation: string,
  ) {}

  /**
   * Whether the attempt derived a key for a downstream call: its release
   * then binds the key to its request.
   */
  get derived(): boolean {
    return this.keysDerived;
  }

  /**
   * A recovery point (see `IdempotencyContext.step`): the stored result of
   * step `name` of this key, else `fn`'s, committed at once, fenced by the
   * owner. Tracked until it settles (see {@link settled}).
   */
  step<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const running: Promise<T> = this.run(name, fn).finally(() => {
      this.running.delete(running);
    });
    this.running.add(running);
    return running;
  }

  /**
   * Resolves once no step of the attempt is under way (`true`), or at
   * `deadline` (epoch ms) while one still is (`false`). A step started in
   * the meantime is waited for too (though, the attempt ended, it is
   * refused before its effect).
   */
  async settled(deadline: number): Promise<boolean> {
    while (this.running.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) {
        return false;
      }
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        Promise.allSettled([...this.running]).then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(resolve, left, true);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        return false;
      }
    }
    return true;
  }

  private async run<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
    const { host } = this;
    const { attempt, options, transaction } = this.owner;
    const lease = this.named('step', name);
    checkStepName(lease.scope, lease.key, name);
    if (this.names.has(name)) {
      throw duplicateStepError(name);
    }
    this.names.add(name);
    const read = await ownStatement(() =>
      this.bounded(host.store.readStep(lease, name), 'step read'),
    );
    if (read) {
      const stored = storedStep(read.result);
      if ('unkept' in stored) {
        throw unkeptAnswer(name, stored.unkept);
      }
      return stored.result as T;
    }
    if (transaction.state === 'open') {
      const route = `${attempt.method} ${attempt.path} step ${JSON.stringify(name)}`;
      host.warn(
        `${route} runs while the handler's transaction is open: its connection is held during the step. Run steps before the handler's first database statement.`,
        route,
      );
    }
    this.refuseEnded();
    // The effect may happen even if its result never commits: from now on
    // the key belongs to this request, whose retry must derive the same
    // downstream keys (and no other request may run under the key). The
    // binding lasts until the key completes or expires.
    //
    // Fenced before every step's effect, not only the first's: an attempt
    // whose claim another attempt took over (its lease ran out while it was
    // paused, before a renewal could tell it) would otherwise start its
    // effect beside the new owner's, which resumes after the last step saved.
    if (
      !(await ownStatement(() =>
        this.bounded(host.store.bind(lease, this.holdMs()), 'binding'),
      ))
    ) {
      throw new LeaseLostError();
    }
    this.refuseEnded();
    const json = jsonResult(await fn());
    if (this.owner.isAbandoned) {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
    if ('notJson' in json) {
      // Its effect ran: a retry that ran it again would meet the same
      // result, and a payment would be made twice.
      return this.saveUnkept(
        lease,
        name,
        { notJson: json.notJson },
        `The result of step ${JSON.stringify(name)} is not a value JSON can hold (${json.notJson})`,
      );
    }
    await this.save(lease, name, json.result);
    return json.result as T;
  }

  /**
   * Saves a step's result, fenced by the owner. A result the store can
   * never keep (too large) is a permanent condition, unlike a store out of
   * reach: see {@link saveUnkept}.
   * @throws LeaseLostError, IdempotencyStepResultTooLargeException, or
   * the store's error (503).
   */
  private async save(
    lease: StepLease,
    name: string,
    result: unknown,
  ): Promise<void> {
    let saved: boolean;
    try {
      saved = await this.saveValue(lease, name, storedStepValue(result));
    } catch (error) {
      if (!(error instanceof IdempotencyStepTooLargeError)) {
        throw error;
      }
      const unkept = { bytes: error.bytes, limitBytes: error.limitBytes };
      return this.saveUnkept(lease, name, unkept, error.message);
    }
    if (!saved) {
      throw new LeaseLostError();
    }
  }

  /**
   * Saves, fenced by the owner, the mark of a step that ran without a
   * result its store can keep (too large, or not JSON): a permanent
   * condition, unlike a store out of reach. Its effect happened, and a
   * retry that ran it again would be refused the same way, again and
   * again. The request is answered with a 500 that every retry gets too,
   * from that mark, without running the step.
   * @param why what went wrong, for the log.
   * @throws LeaseLostError, the step's 500 (its answer), or the store's
   * error (503).
   */
  private async saveUnkept(
    lease: StepLease,
    name: string,
    unkept: UnkeptStep,
    why: string,
  ): Promise<never> {
    const { attempt } = this.owner;
    const route = `${attempt.method} ${attempt.path}`;
    const answer = unkeptAnswer(name, unkept);
    const advice =
      'notJson' in unkept
        ? 'Return a JSON value from the step instead (a BigInt as a string, the fields of a response rather than the response).'
        : "Keep a reference to a large result as the step's result instead.";
    let saved: boolean;
    try {
      saved = await this.saveValue(lease, name, unkeptStepValue(unkept));
    } catch (markError) {
      // Not even the mark fits (the item is full of earlier steps): the
      // client is still told that a retry cannot succeed, rather than
      // asked to retry by a 503 that would run the step again each time.
      if (markError instanceof IdempotencyStepTooLargeError) {
        this.host.warn(
          `${route}: ${why}, and not even the mark that the step ran fits: this request is answered with a 500 (${answer.slug}), and a retry with the same key runs the step again. ${advice}`,
        );
        throw answer;
      }
      throw markError;
    }
    if (!saved) {
      throw new LeaseLostError();
    }
    this.host.warn(
      `${route}: ${why}. The step ran; it is saved as run without a result, and this request and its retries with the same key are answered with a 500 (${answer.slug}) without running it again. ${advice}`,
    );
    throw answer;
  }

  /** Saves `value` as the step's, fenced by the owner: whether it was. */
  private saveValue(
    lease: StepLease,
    name: string,
    value: unknown,
  ): Promise<boolean> {
    return ownStatement(() =>
      this.bounded(
        this.host.store.saveStep(lease, name, value, this.holdMs()),
        'step save',
      ),
    );
  }

  /**
   * A call of the store for a step, bounded by the attempt's deadline (at
   * least a round trip's time): the handler gets an error (503) instead of
   * waiting for ever on an unreachable store. A save that lands late is
   * the retry's to read (fenced by the owner, it lands only while the
   * claim is this attempt's).
   */
  private bounded<T>(call: Promise<T>, name: string): Promise<T> {
    const { attempt, options } = this.owner;
    return withinStoreTime(
      call,
      storeCallMs(attempt.started + options.transactionTimeoutMs),
      name,
    );
  }

  /**
   * How long from now a step, and the key's binding to its request, are
   * kept: `ttl` after the attempt's deadline. The attempt ends by then
   * (abandoned at it), and its retry may come until `ttl` later: with a
   * `ttl` shorter than the handler's time, a step kept `ttl` from its save
   * would expire before a retry resumes after it (its effect run again),
   * and the binding would lapse (the retry's keys derived anew).
   */
  private holdMs(): number {
    const { attempt, options } = this.owner;
    const deadline = attempt.started + options.transactionTimeoutMs;
    return options.ttlMs + Math.max(0, deadline - Date.now());
  }

  /**
   * Refuses to start a step's effect for an attempt that cannot commit
   * (and would run it beside the retry's): one whose claim a renewal found
   * taken over, whose transaction was lost, that was abandoned at its
   * deadline (its claim released for the retry), or that ended already
   * (its handler failed or returned: a step it did not await).
   * @throws LeaseLostError, IdempotencyUnavailableException (503).
   */
  private refuseEnded(): void {
    const { isLeaseLost, isSettled, transaction, options } = this.owner;
    if (isLeaseLost) {
      throw new LeaseLostError();
    }
    if (isSettled || transaction.state === 'lost') {
      throw new IdempotencyUnavailableException(options.retryAfter);
    }
  }

  /**
   * The key of the downstream call `name` (see `IdempotencyContext.deriveKey`):
   * unique to the scope, the key, the request's fingerprint, the key's
   * generation and `name`. Once one is derived, a release binds the key to
   * the request (a step binds it before it runs): the same request retried
   * derives the same key, and the downstream service deduplicates a call
   * whose step never committed.
   */
  deriveKey(name: string): string {
    const { attempt } = this.owner;
    const lease = this.named('deriveKey', name);
    this.keysDerived = true;
    return derivedKey({
      scope: attempt.scope,
      key: lease.key,
      fingerprint: attempt.fingerprint,
      generation: this.generation,
      name,
    });
  }

  /**
   * The claim of a request with a key, for a call of
   * `IdempotencyContext[method]` with `name` (a step's, a downstream call's).
   * @throws IdempotencyConfigurationError for a keyless request or an empty name.
   */
  private named(method: 'step' | 'deriveKey', name: unknown): StepLease {
    const { lease } = this.owner;
    if (!lease) {
      throw new IdempotencyConfigurationError(
        `IdempotencyContext.${method}() needs an idempotency key, and this request has none.`,
        'Require a key on this route (the default), or derive one with the `key` option.',
      );
    }
    if (typeof name !== 'string' || name.length === 0) {
      throw new IdempotencyConfigurationError(
        `Invalid name of a ${method === 'step' ? 'step' : 'derived key'}: ${JSON.stringify(name)}.`,
        'Name every step and downstream call with a non-empty string, unique within the handler.',
      );
    }
    return lease;
  }
}

/**
 * Raised by `IdempotencyContext.step()` before 0.7 when the step's result
 * could not be stored as JSON, whose retry ran the step again.
 * @deprecated Never raised since 0.7: such a step is kept as run without
 * a result, and the request and its every retry get an
 * `IdempotencyStepResultNotJsonException` (500) without running it again.
 */
export class StepResultError extends Error {
  constructor(name: string, cause: unknown) {
    super(
      `The result of step ${JSON.stringify(name)} cannot be stored as JSON (${messageOf(cause)}): its effect ran, and runs again when the request is retried. Return a JSON value from the step (a BigInt as a string)`,
    );
    this.name = 'StepResultError';
  }
}

/** The answer to a step that ran without a result its store could keep. */
function unkeptAnswer(
  name: string,
  unkept: UnkeptStep,
):
  | IdempotencyStepResultTooLargeException
  | IdempotencyStepResultNotJsonException {
  return 'notJson' in unkept
    ? new IdempotencyStepResultNotJsonException(name, unkept.notJson)
    : new IdempotencyStepResultTooLargeException(
        name,
        unkept.bytes,
        unkept.limitBytes,
      );
}

/**
 * A step's result as the stores keep it and a resumed request reads it
 * back, which the first run gets too (so that the code after a step sees
 * the same value whether it ran or resumed: a `Date` as its ISO string, a
 * `Map` as `{}`, `NaN` as `null`): `null` for a value that JSON has no text
 * for (`undefined`, a function, a symbol, a `toJSON` that returns
 * nothing), which a store would otherwise keep as no JSON at all (read
 * back, it fails every retry of the key), else the value through JSON;
 * or, for a value JSON cannot hold (a `BigInt`, a cycle, a `toJSON` that
 * throws), why not.
 */
function jsonResult(
  result: unknown,
): { readonly result: unknown } | { readonly notJson: string } {
  if (result === undefined || result === null) {
    return { result: null };
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(result);
  } catch (error) {
    return { notJson: messageOf(error) };
  }
  return { result: json === undefined ? null : (JSON.parse(json) as unknown) };
}
