import { performance } from 'node:perf_hooks';
// Types only: the package itself is loaded by IdempotencyTelemetry, when present.
import type * as OpenTelemetry from '@opentelemetry/api';
import type { Context, Exception, Span, Tracer } from '@opentelemetry/api';
import type { IdempotencyTelemetryKeys } from '../interfaces/idempotency-module-options.interface.js';
import type { IdempotencyEventType } from '../interfaces/idempotency-event.interface.js';
import type { Attempt } from '../core/attempt.js';
import type {
  OutgoingCall,
  OutgoingCallRecord,
} from '../core/attempt-telemetry.js';
import { TelemetryMetrics } from './telemetry-metrics.js';
import {
  ATTRIBUTES,
  callAttributes,
  SPAN_NAMES,
  routeAttributes,
  spanAttributes,
  type TelemetryAttributes,
} from './telemetry-attributes.js';

/**
 * @internal How an attempt ended: the event that ended it, or `error` when
 * its handler threw (or answered with a 5xx) and nothing was stored.
 */
export type AttemptOutcome =
  Exclude<IdempotencyEventType, 'gc' | 'abandoned'> | 'error';

/** Name of the module's tracer and meter (the instrumentation scope). */
const SCOPE = 'nestjs-idempotency';

/** Outcomes of an attempt that failed: their spans get the error status. */
const FAILURES = new Set<AttemptOutcome>([
  'failed',
  'timeout',
  'lease-lost',
  'error',
]);

/** Outcomes decided on a finished record: a replay or a refusal of it. */
const REPLAY_OUTCOMES = new Set<string>([
  'replayed',
  'mismatch',
  'not-replayable',
]);

/** @internal The parts of `@opentelemetry/api` the module uses. */
export type OpenTelemetryApi = Pick<
  typeof OpenTelemetry,
  | 'context'
  | 'metrics'
  | 'trace'
  | 'SpanStatusCode'
  | 'SpanKind'
  | 'ProxyTracerProvider'
  | 'createNoopMeter'
>;

/** What is recorded of one attempt while it runs. */
interface AttemptState {
  /** The context the attempt came in: its spans are children of its span. */
  readonly parent: Context;
  /** The span the module opened as their parent, when none was active. */
  readonly root?: Span;
  /** The attributes of its spans, made when a span first records. */
  attributes?: TelemetryAttributes;
  claim?: Span;
  /** When the claim ended (`performance.now()`), for a replay's span. */
  claimEnded?: number;
  claimResult?: string;
  handler?: Span;
  commit?: Span;
  commitStarted?: number;
  /** The handler failed, and the claim may yet store its error response. */
  handlerFailed: boolean;
  outcome?: AttemptOutcome;
}

/**
 * @internal The spans and metrics of the module, through the OpenTelemetry
 * API it is given (never imported by this file). One instance per
 * application, made by `IdempotencyTelemetry` once the API is loaded.
 */
export class TelemetryRecorder {
  private readonly states = new WeakMap<Attempt, AttemptState>();
  private readonly tracer: Tracer;
  private readonly metrics: TelemetryMetrics;

  constructor(
    private readonly api: OpenTelemetryApi,
    private readonly keys: IdempotencyTelemetryKeys,
  ) {
    this.tracer = api.trace.getTracer(SCOPE);
    this.metrics = new TelemetryMetrics(
      api.metrics.getMeter(SCOPE),
      api.createNoopMeter(),
    );
  }

  /**
   * Whether anything records an attempt now: the meters, or a tracer
   * provider registered (it may be, any time). Otherwise an attempt is not
   * followed at all, and costs nothing.
   */
  get recording(): boolean {
    if (this.metrics.metered) {
      return true;
    }
    const provider = this.api.trace.getTracerProvider();
    return (
      !(provider instanceof this.api.ProxyTracerProvider) ||
      provider.getDelegateTracer(SCOPE) !== undefined
    );
  }

  /** Whether an attempt is followed (its claim was recorded). */
  follows(attempt: Attempt): boolean {
    return this.states.has(attempt);
  }

  /**
   * Claims the key of an attempt (`fn`) in the `idempotency.claim` span, a
   * child of the span active now, as the attempt's later spans will be.
   */
  async claim<T extends object>(
    attempt: Attempt,
    fn: () => Promise<T>,
  ): Promise<T> {
    const { context, trace } = this.api;
    const active = context.active();
    // Without a span to be children of (no instrumentation, a job), the
    // attempt's spans get one, so that they make one trace.
    const root = trace.getSpan(active)
      ? undefined
      : this.tracer.startSpan(SPAN_NAMES.attempt, {}, active);
    const state: AttemptState = {
      parent: root ? trace.setSpan(active, root) : active,
      root,
      handlerFailed: false,
    };
    if (root?.isRecording()) {
      state.attributes = spanAttributes(attempt, this.keys);
      root.setAttributes(state.attributes);
    }
    this.states.set(attempt, state);
    if (attempt.key === undefined) {
      return fn();
    }
    const span = this.startSpan(SPAN_NAMES.claim, attempt, state);
    state.claim = span;
    const started = performance.now();
    try {
      const beginning = await fn();
      state.claimResult = 'replay' in beginning ? 'finished' : 'claimed';
      return beginning;
    } catch (error) {
      state.claimResult = state.outcome ?? 'failed';
      if (state.outcome === undefined) {
        this.fail(span, error);
      }
      throw error;
    } finally {
      state.claimEnded = performance.now();
      state.claim = undefined;
      span.setAttribute(ATTRIBUTES.claimResult, state.claimResult!);
      span.end(state.claimEnded);
      this.metrics.claimDuration.record((state.claimEnded - started) / 1000, {
        ...routeAttributes(attempt),
        [ATTRIBUTES.claimResult]: state.claimResult!,
      });
    }
  }

  /**
   * `fn`, the handler of an attempt, in the `idempotency.handler` span,
   * active while it runs: the spans of its own work are its children.
   */
  handler<T>(attempt: Attempt, fn: () => Promise<T>): Promise<T> {
    const state = this.states.get(attempt);
    if (!state) {
      return fn();
    }
    const span = this.startSpan(SPAN_NAMES.handler, attempt, state);
    state.handler = span;
    const { context, trace } = this.api;
    return context.with(trace.setSpan(state.parent, span), async () => {
      try {
        return await fn();
      } catch (error) {
        if (state.handler === span) {
          this.fail(span, error);
        }
        throw error;
      } finally {
        // Unless the attempt already ended it (abandoned at its deadline).
        if (state.handler === span) {
          state.handler = undefined;
          span.end();
        }
      }
    });
  }

  /** The completion of an attempt begins: its `idempotency.commit` span. */
  committing(attempt: Attempt): void {
    const state = this.states.get(attempt);
    if (!state || state.outcome !== undefined) {
      return;
    }
    state.commit = this.startSpan(SPAN_NAMES.commit, attempt, state);
    state.commitStarted = performance.now();
  }

  /**
   * The handler of an attempt failed (`handlerError`), or the attempt failed
   * otherwise: a handler's failure is the attempt's outcome (`error`) once
   * its claim is released, unless its error response is stored.
   */
  failed(attempt: Attempt, handlerError: boolean): void {
    const state = this.states.get(attempt);
    if (state && handlerError) {
      state.handlerFailed = true;
    }
  }

  /** The claim of an attempt was released (or it had none). */
  released(attempt: Attempt): void {
    const state = this.states.get(attempt);
    if (state?.handlerFailed && state.outcome === undefined) {
      this.ended(attempt, 'error');
    }
  }

  /**
   * An attempt ended with `outcome` (its first one counts): recorded on the
   * spans still open, on the span the attempt came in, and in the metrics.
   */
  ended(attempt: Attempt, outcome: AttemptOutcome, error?: unknown): void {
    const state = this.states.get(attempt);
    if (!state || state.outcome !== undefined) {
      return;
    }
    state.outcome = outcome;
    const failure = FAILURES.has(outcome);
    if (REPLAY_OUTCOMES.has(outcome) && state.claimResult === 'finished') {
      const replay = this.startSpan(SPAN_NAMES.replay, attempt, state, {
        startTime: state.claimEnded,
      });
      replay.setAttribute(ATTRIBUTES.outcome, outcome);
      replay.end(performance.now());
    }
    for (const span of [state.claim, state.handler, state.commit]) {
      if (span) {
        span.setAttribute(ATTRIBUTES.outcome, outcome);
        if (failure) {
          this.fail(span, error, outcome);
        }
      }
    }
    // A handler still running was abandoned: its span ends with the attempt.
    state.handler?.end();
    state.handler = undefined;
    const attributes = {
      ...routeAttributes(attempt),
      [ATTRIBUTES.outcome]: outcome,
    };
    if (state.commit) {
      const ended = performance.now();
      state.commit.end(ended);
      state.commit = undefined;
      this.metrics.commitDuration.record(
        (ended - state.commitStarted!) / 1000,
        attributes,
      );
    }
    const parent = this.api.trace.getSpan(state.parent);
    if (parent?.isRecording()) {
      parent.setAttribute(ATTRIBUTES.outcome, outcome);
      if (failure && parent === state.root) {
        this.fail(parent, error, outcome);
      }
    }
    state.root?.end();
    this.metrics.requests.add(1, attributes);
    this.metrics.requestDuration.record(
      Math.max(0, Date.now() - attempt.started) / 1000,
      attributes,
    );
  }

  /**
   * `fn`, an outgoing call of an attempt's handler with its retries, in the
   * `idempotency.call` span, a child of the span active now (the
   * handler's), and active while it runs: the spans of each request sent
   * (an HTTP client's instrumentation) are its children.
   */
  call<T>(
    call: OutgoingCall,
    fn: (record: OutgoingCallRecord) => Promise<T>,
  ): Promise<T> {
    const { context, trace } = this.api;
    const active = context.active();
    const span = this.tracer.startSpan(
      SPAN_NAMES.call,
      { kind: this.api.SpanKind.CLIENT },
      active,
    );
    if (span.isRecording()) {
      span.setAttributes(callAttributes(call, this.keys));
    }
    const record: OutgoingCallRecord = { resends: 0 };
    return context.with(trace.setSpan(active, span), async () => {
      try {
        const result = await fn(record);
        span.setAttribute(ATTRIBUTES.callResult, 'succeeded');
        return result;
      } catch (error) {
        span.setAttribute(ATTRIBUTES.callResult, callFailure(error));
        this.fail(span, error);
        throw error;
      } finally {
        if (record.status !== undefined) {
          span.setAttribute(ATTRIBUTES.statusCode, record.status);
        }
        span.setAttribute(ATTRIBUTES.resendCount, record.resends);
        span.end();
      }
    });
  }

  private startSpan(
    name: string,
    attempt: Attempt,
    state: AttemptState,
    options: { startTime?: number } = {},
  ): Span {
    const span = this.tracer.startSpan(name, options, state.parent);
    // Attributes (a hash of the key) are made only for a span that records.
    if (span.isRecording()) {
      state.attributes ??= spanAttributes(attempt, this.keys);
      span.setAttributes(state.attributes);
    }
    return span;
  }

  /** Marks a span as failed, with the error behind it when there is one. */
  private fail(span: Span, error: unknown, outcome?: AttemptOutcome): void {
    if (error !== undefined) {
      span.recordException(exception(error));
    }
    span.setStatus({
      code: this.api.SpanStatusCode.ERROR,
      message:
        error instanceof Error ? error.message : (outcome ?? String(error)),
    });
  }
}

/**
 * How an outgoing call failed, for its span: refused by the downstream
 * service, unavailable after its retries, or another error.
 */
function callFailure(error: unknown): string {
  const slug = (error as { slug?: unknown } | undefined)?.slug;
  return slug === 'downstream-refused'
    ? 'refused'
    : slug === 'downstream-unavailable'
      ? 'unavailable'
      : 'error';
}

/** An error as `recordException` takes it. */
function exception(error: unknown): Exception {
  return error instanceof Error ? error : String(error);
}
