import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import type { Attempt } from './attempt.js';
import type { FailureKind } from './failures.js';

/**
 * @internal What the request sequence tells about an attempt, for spans and
 * metrics: the OpenTelemetry recorder (`telemetry/`) implements it (a
 * no-op without `@opentelemetry/api` or with `telemetry: false`).
 *
 * The interface doubles as its injection token.
 */
export interface AttemptTelemetry {
  /** Runs `fn`, the claim of an attempt's key, in its span. */
  claim<T extends object>(attempt: Attempt, fn: () => Promise<T>): Promise<T>;
  /** `fn`, an attempt's handler, to run in its span. */
  handler<T>(attempt: Attempt, fn: () => Promise<T>): () => Promise<T>;
  /** The completion of an attempt begins. */
  committing(attempt: Attempt): void;
  /** An attempt's handler or transaction failed, as `kind` tells. */
  failed(attempt: Attempt, kind: FailureKind): void;
  /** An attempt's claim was released (or it had none). */
  released(attempt: Attempt): void;
  /** An event of an attempt: the first that ends it is its outcome. */
  event(attempt: Attempt, type: IdempotencyEventType, error?: unknown): void;
  /**
   * Runs `fn`, an outgoing call of an attempt's handler with its retries, in
   * its span (a child of the handler's); `fn` fills in `record` as it goes.
   */
  call<T>(
    attempt: Attempt,
    call: OutgoingCall,
    fn: (record: OutgoingCallRecord) => Promise<T>,
  ): Promise<T>;
}

/** @internal An outgoing call of a handler, as its span names it. */
export interface OutgoingCall {
  /** The step it is the recovery point of. */
  readonly step: string;
  readonly method: string;
  readonly url: URL;
  /** The key it sends downstream (the request's, derived). */
  readonly key: string;
}

/** @internal What an outgoing call tells of itself while it runs. */
export interface OutgoingCallRecord {
  /** The status of its last answer, if one came. */
  status?: number;
  /** How many times it was sent again. */
  resends: number;
}

/** @internal Injection token of the {@link AttemptTelemetry}. */
export const AttemptTelemetry = Symbol('AttemptTelemetry');
