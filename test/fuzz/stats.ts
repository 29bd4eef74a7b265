import { KNOWN_METHODS } from './requests.js';
import type { Exchange } from './verdict.js';

function bump<K>(map: Map<K, number>, key: K, by = 1): void {
  map.set(key, (map.get(key) ?? 0) + by);
}

function histogram(map: ReadonlyMap<string, number>): string {
  return [...map.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, count]) => `${name}: ${count}`)
    .join(', ');
}

/** Counts of what was sent and what came back, for the test output. */
export class FuzzStats {
  requests = 0;
  scenarios = 0;
  /** Keys with a first execution (one record each). */
  keysExecuted = 0;
  readonly statuses = new Map<string, number>();
  readonly outcomes = new Map<string, number>();
  /** Key category -> how the server must read it -> count. */
  readonly categories = new Map<string, Map<string, number>>();
  readonly bodies = new Map<string, number>();
  readonly methods = new Map<string, number>();
  readonly socketErrors = new Map<string, number>();

  record({ request, response, outcome }: Exchange): void {
    this.requests += 1;
    bump(this.statuses, String(response.status ?? 'closed'));
    bump(this.outcomes, outcome);
    const readings =
      this.categories.get(request.category) ?? new Map<string, number>();
    bump(readings, request.reading.kind);
    this.categories.set(request.category, readings);
    bump(
      this.bodies,
      `${request.body.kind}${request.body.chunked ? '+chunked' : ''}`,
    );
    bump(
      this.methods,
      request.template !== undefined
        ? request.method
        : KNOWN_METHODS.has(request.method)
          ? `${request.method} (no route)`
          : 'other token (not a method for llhttp)',
    );
    if (response.socketError) {
      bump(this.socketErrors, response.socketError);
    }
  }

  scenario(keysExecuted: number): void {
    this.scenarios += 1;
    this.keysExecuted += keysExecuted;
  }

  report(run: {
    platform: string;
    seed: number;
    runs: number;
    executions: number;
    seconds: number;
  }): string {
    const categories = [...this.categories.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(
        ([category, readings]) =>
          `    ${category}: ${[...readings.values()].reduce((a, b) => a + b, 0)} (${histogram(readings)})`,
      );
    return [
      `I8 fuzz on ${run.platform}: seed ${run.seed}, ${run.runs} runs (${run.executions} scenarios executed), ${this.requests} requests in ${run.seconds.toFixed(1)} s`,
      `  statuses: ${histogram(this.statuses)}`,
      `  outcomes: ${histogram(this.outcomes)}`,
      `  keys executed (= records): ${this.keysExecuted}`,
      `  key categories (how the server must read them):`,
      ...categories,
      `  bodies: ${histogram(this.bodies)}`,
      `  methods: ${histogram(this.methods)}`,
      `  closed without a response: ${this.statuses.get('closed') ?? 0}; the HTTP server's own 400: ${this.outcomes.get('http-400') ?? 0}`,
      `  socket errors: ${histogram(this.socketErrors) || 'none'}`,
    ].join('\n');
  }
}
