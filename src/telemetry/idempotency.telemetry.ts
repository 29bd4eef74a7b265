import { Logger } from '@nestjs/common';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import type { Attempt } from '../core/attempt.js';
import type {
  AttemptTelemetry,
  OutgoingCall,
  OutgoingCallRecord,
} from '../core/attempt-telemetry.js';
import type { FailureKind } from '../core/failures.js';
import { loadOptionalPeer } from '../core/optional-peer.js';
import type {
  OpenTelemetryApi,
  TelemetryRecorder,
} from './telemetry-recorder.js';
import { messageOf } from '../core/error-message.js';

/** The optional peer the module records through. */
const OPENTELEMETRY_API = '@opentelemetry/api';

/** Events that end an attempt (the others are of the collector). */
function isAttemptOutcome(
  type: IdempotencyEventType,
): type is Exclude<IdempotencyEventType, 'gc' | 'abandoned'> {
  return type !== 'gc' && type !== 'abandoned';
}

/**
 * @internal OpenTelemetry spans and metrics of the request sequence (the
 * core's AttemptTelemetry), called by the executor around the claim, the
 * handler and the commit, and with every outcome. Without `@opentelemetry/api` (or with `telemetry: false`) every
 * method is a no-op that loads and allocates nothing.
 */
export class IdempotencyTelemetry implements AttemptTelemetry {
  private constructor(private readonly recorder?: TelemetryRecorder) {}

  /**
   * Loads `@opentelemetry/api` if the option allows and it is installed, once,
   * at startup.
   */
  static async load(
    options: ResolvedIdempotencyOptions,
  ): Promise<IdempotencyTelemetry> {
    if (!options.telemetry) {
      return new IdempotencyTelemetry();
    }
    let api: OpenTelemetryApi | undefined;
    try {
      api = await loadOptionalPeer(
        OPENTELEMETRY_API,
        () => import('@opentelemetry/api'),
      );
    } catch (error) {
      new Logger('Idempotency').warn(
        `${OPENTELEMETRY_API} could not be loaded, no spans nor metrics are recorded: ${messageOf(error)}`,
      );
      return new IdempotencyTelemetry();
    }
    if (!api) {
      new Logger('Idempotency').debug(
        `${OPENTELEMETRY_API} is not installed: no spans nor metrics are recorded`,
      );
      return new IdempotencyTelemetry();
    }
    const { TelemetryRecorder } = await import('./telemetry-recorder.js');
    return new IdempotencyTelemetry(
      new TelemetryRecorder(api, options.telemetry.keys),
    );
  }

  /** Runs `fn`, the claim of an attempt's key, in its span. */
  claim<T extends object>(attempt: Attempt, fn: () => Promise<T>): Promise<T> {
    return this.recorder?.recording ? this.recorder.claim(attempt, fn) : fn();
  }

  /** `fn`, an attempt's handler, to run in its span. */
  handler<T>(attempt: Attempt, fn: () => Promise<T>): () => Promise<T> {
    const { recorder } = this;
    return recorder?.follows(attempt)
      ? () => recorder.handler(attempt, fn)
      : fn;
  }

  /** The completion of an attempt begins. */
  committing(attempt: Attempt): void {
    this.recorder?.committing(attempt);
  }

  /** An attempt's handler or transaction failed, as `kind` tells. */
  failed(attempt: Attempt, kind: FailureKind): void {
    this.recorder?.failed(attempt, kind === 'handler');
  }

  /** An attempt's claim was released (or it had none). */
  released(attempt: Attempt): void {
    this.recorder?.released(attempt);
  }

  /** An event of an attempt: the first that ends it is its outcome. */
  event(attempt: Attempt, type: IdempotencyEventType, error?: unknown): void {
    if (this.recorder && isAttemptOutcome(type)) {
      this.recorder.ended(attempt, type, error);
    }
  }

  /** Runs `fn`, an outgoing call of an attempt's handler, in its span. */
  call<T>(
    attempt: Attempt,
    call: OutgoingCall,
    fn: (record: OutgoingCallRecord) => Promise<T>,
  ): Promise<T> {
    return this.recorder?.follows(attempt)
      ? this.recorder.call(call, fn)
      : fn({ resends: 0 });
  }
}
