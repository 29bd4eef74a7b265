import autocannon from 'autocannon';

/** One load run: the same POST over `connections` keep-alive connections. */
export interface LoadOptions {
  /** Base URL of the application, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  /** Route to POST to, e.g. `/bench/payments`. */
  readonly path: string;
  /** JSON body, the same for every request. */
  readonly body: string;
  /** Concurrent connections, one request in flight on each. */
  readonly connections: number;
  /** The `Idempotency-Key` of each request, called once per request. */
  readonly key: () => string;
  /** Seconds to run for; ignored when `amount` is set. */
  readonly seconds?: number;
  /** Exact number of requests to send, then stop. */
  readonly amount?: number;
  /** Requests per second over all connections; as fast as possible if unset. */
  readonly rate?: number;
}

/** What a load run measured. */
export interface LoadResult {
  /** Responses received (any status). */
  readonly requests: number;
  /** Wall-clock seconds from the start of the run to its last response. */
  readonly seconds: number;
  /** Responses per second. */
  readonly rps: number;
  /** Latency percentiles over every response, in milliseconds. */
  readonly p50: number;
  readonly p99: number;
  /** Responses by status code. */
  readonly statuses: Readonly<Record<string, number>>;
  /** Responses that are not 2xx. */
  readonly non2xx: number;
  /** 2xx responses that carried `Idempotent-Replayed: true`. */
  readonly replayed: number;
  /** Connection errors and timeouts. */
  readonly errors: number;
}

/** The `p`th percentile of ascending `sorted` values (nearest rank). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) {
    return NaN;
  }
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** The median of `values` (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length === 0
    ? NaN
    : sorted.length % 2 === 1
      ? sorted[middle]
      : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** An interval that holds the median of what was sampled, at `coverage`. */
export interface MedianInterval {
  readonly low: number;
  readonly high: number;
  /** The probability that the interval holds the median (0 to 1). */
  readonly coverage: number;
}

/**
 * The narrowest interval between two of `values` (order statistics) that
 * holds the median of the distribution they were drawn from with
 * probability `confidence` or more; no assumption on that distribution.
 * With too few values for `confidence`, their whole range, at the coverage
 * it has (1 - 2 / 2^n).
 */
export function medianInterval(
  values: readonly number[],
  confidence = 0.95,
): MedianInterval {
  const sorted = [...values].sort((a, b) => a - b);
  const n = sorted.length;
  if (n === 0) {
    return { low: NaN, high: NaN, coverage: 0 };
  }
  // below[j]: the probability that at most j of n values fall under the
  // median (Binomial(n, 1/2)).
  const below: number[] = [];
  let term = 0.5 ** n;
  let sum = 0;
  for (let j = 0; j <= n; j += 1) {
    sum += term;
    below.push(sum);
    term = (term * (n - j)) / (j + 1);
  }
  // [x_k, x_(n+1-k)] (1-based) holds the median with 1 - 2 * below[k - 1].
  let k = 1;
  while (k + 1 <= n + 1 - (k + 1) && 1 - 2 * below[k] >= confidence) {
    k += 1;
  }
  return {
    low: sorted[k - 1],
    high: sorted[n - k],
    coverage: 1 - 2 * below[k - 1],
  };
}

/** Whether the raw header list of a response says it is a replay. */
function isReplay(rawHeaders: unknown): boolean {
  if (!Array.isArray(rawHeaders)) {
    return false;
  }
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (
      String(rawHeaders[i]).toLowerCase() === 'idempotent-replayed' &&
      String(rawHeaders[i + 1]) === 'true'
    ) {
      return true;
    }
  }
  return false;
}

/**
 * Drives one route with autocannon over loopback and measures every response
 * itself: latencies in fractional milliseconds (autocannon's own histogram
 * rounds to whole ones), statuses, and replays (by their header).
 */
export function runLoad(options: LoadOptions): Promise<LoadResult> {
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  let replayed = 0;
  let started = 0;
  let lastResponse = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        pipelining: 1,
        duration: options.seconds ?? 10,
        amount: options.amount,
        overallRate: options.rate,
        timeout: 30,
        requests: [
          {
            method: 'POST',
            path: options.path,
            headers: { 'content-type': 'application/json' },
            body: options.body,
            setupRequest: (request) => ({
              ...request,
              headers: {
                ...request.headers,
                'idempotency-key': options.key(),
              },
            }),
          },
        ],
        setupClient: (client) => {
          // autocannon passes the parser's record (`headers` is the raw
          // name/value list), not what its type declarations say.
          (client as NodeJS.EventEmitter).on(
            'headers',
            (response: { headers?: unknown }) => {
              if (isReplay(response.headers)) {
                replayed += 1;
              }
            },
          );
        },
      },
      (error: unknown, result: autocannon.Result) => {
        if (error) {
          reject(error instanceof Error ? error : new Error(String(error)));
          return;
        }
        // Up to the last response: autocannon notices the end of the run on
        // its next one-second tick, and the clients sit idle until then.
        const seconds = (lastResponse - started) / 1000;
        latencies.sort((a, b) => a - b);
        const non2xx = Object.entries(statuses)
          .filter(([status]) => !status.startsWith('2'))
          .reduce((sum, [, count]) => sum + count, 0);
        resolve({
          requests: latencies.length,
          seconds,
          rps: latencies.length / seconds,
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
          statuses,
          non2xx,
          replayed,
          errors: result.errors,
        });
      },
    );
    started = performance.now();
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      lastResponse = performance.now();
      latencies.push(responseTime);
      statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
    });
  });
}
