// Types only: the package itself is loaded by IdempotencyTelemetry, when present.
import type { Counter, Histogram, Meter } from '@opentelemetry/api';
import { METRIC_NAMES } from './telemetry-attributes.js';

/** Those of `http.server.request.duration`, in seconds. */
const DURATION_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
];

/** @internal The module's instruments, on the meter it is given. */
export class TelemetryMetrics {
  readonly requests: Counter;
  readonly requestDuration: Histogram;
  readonly claimDuration: Histogram;
  readonly commitDuration: Histogram;
  /** Whether a meter provider was registered: the meters record. */
  readonly metered: boolean;

  /**
   * @param meter the module's meter.
   * @param noop a meter of the API's no-op kind, to tell `meter` from one.
   */
  constructor(meter: Meter, noop: Meter) {
    // The API gives a no-op meter for good when no provider is registered
    // yet: metrics are never recorded then.
    this.metered = meter.constructor !== noop.constructor;
    const seconds = (description: string) => ({
      description,
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.requests = meter.createCounter(METRIC_NAMES.requests, {
      description:
        'Requests, messages and runs on idempotent handlers, by outcome.',
      unit: '{request}',
    });
    this.requestDuration = meter.createHistogram(
      METRIC_NAMES.requestDuration,
      seconds(
        'Duration of idempotent requests, from their arrival to their outcome.',
      ),
    );
    this.claimDuration = meter.createHistogram(
      METRIC_NAMES.claimDuration,
      seconds(
        'Duration of claims of idempotency keys, waits for a duplicate included.',
      ),
    );
    this.commitDuration = meter.createHistogram(
      METRIC_NAMES.commitDuration,
      seconds(
        'Duration of completions: the fenced write of the record and the commit.',
      ),
    );
  }
}
