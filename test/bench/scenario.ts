import type { SampleProcess } from '../utils/sample-process.js';
import { median, type LoadOptions, type LoadResult } from './load.js';

/** The body of every request of the benches: the sample's payment. */
export const BODY = JSON.stringify({
  amount: 1250,
  currency: 'EUR',
  merchantId: 'm_42',
});

/** A way of sending requests, measured in every round. */
export interface LoadScenario {
  readonly name: string;
  readonly path: string;
  /** Concurrent connections of its load runs. */
  readonly connections: number;
  /** What its ratios are taken against; none for a baseline. */
  readonly baseline?: LoadScenario;
  /** Keys for one run; `run` tells runs apart so that keys never repeat by accident. */
  keys(run: string): () => string;
}

/** A new key for every request. */
export const fresh =
  (prefix: string) =>
  (run: string): (() => string) => {
    let n = 0;
    return () => `${prefix}-${run}-${n++}`;
  };

/** `count` keys, the same for every run, each again after `count` requests. */
export const completed =
  (prefix: string, count: number) => (): (() => string) => {
    let n = 0;
    return () => `${prefix}-${n++ % count}`;
  };

/** The load of one run of `scenario` on `app` (its length aside). */
export function load(
  app: SampleProcess,
  scenario: LoadScenario,
  run: string,
): Omit<LoadOptions, 'seconds' | 'amount' | 'rate'> {
  return {
    url: app.url,
    path: scenario.path,
    body: BODY,
    connections: scenario.connections,
    key: scenario.keys(run),
  };
}

/** What one scenario measured over the rounds. */
export interface Rounds<R> {
  readonly rounds: R[];
  /** Its throughput over its baseline's, round by round. */
  readonly ratios: number[];
  /** Its p99 latency over its baseline's, round by round. */
  readonly p99Ratios: number[];
}

/**
 * The order of the scenarios in round `round`: each round starts with
 * another unit, a unit being a scenario or a group of `together`; a group
 * runs back to back, in its order one round and reversed the next.
 */
export function roundOrder<S>(
  scenarios: readonly S[],
  round: number,
  together: ReadonlyArray<readonly S[]> = [],
): S[] {
  const units: S[][] = [];
  for (const scenario of scenarios) {
    const group = together.find((g) => g.includes(scenario));
    if (!group) {
      units.push([scenario]);
    } else if (group[0] === scenario) {
      units.push(round % 2 === 0 ? [...group] : [...group].reverse());
    }
  }
  return units.flatMap((_, i) => units[(i + round) % units.length]);
}

/**
 * Runs every scenario once a round, `rounds` times, each round starting
 * with another scenario (none always runs first, on a machine warmer or
 * colder than the others), and takes each one's ratios to its baseline
 * within the round. The scenarios of a group of `together` (compared with
 * each other) run back to back, so that what drifts over a round (the
 * database's checkpoints and vacuum, the size of its tables) weighs on
 * them alike, each first every other round. Prints a line per round, after
 * `label`.
 */
export async function interleave<
  S extends LoadScenario,
  R extends { readonly rps: number; readonly p99: number },
>(
  scenarios: readonly S[],
  rounds: number,
  run: (scenario: S, round: number) => Promise<R>,
  label = '',
  together: ReadonlyArray<readonly S[]> = [],
): Promise<Map<S, Rounds<R>>> {
  const results = new Map<S, Rounds<R>>(
    scenarios.map((s) => [s, { rounds: [], ratios: [], p99Ratios: [] }]),
  );
  for (let round = 0; round < rounds; round += 1) {
    const order = roundOrder(scenarios, round, together);
    const measured = new Map<LoadScenario, R>();
    for (const scenario of order) {
      const result = await run(scenario, round);
      measured.set(scenario, result);
      results.get(scenario)!.rounds.push(result);
    }
    for (const [scenario, result] of results) {
      const own = measured.get(scenario)!;
      const base = measured.get(scenario.baseline ?? scenario)!;
      result.ratios.push(own.rps / base.rps);
      result.p99Ratios.push(own.p99 / base.p99);
    }
    console.log(
      `${label}round ${round + 1}/${rounds}: ` +
        scenarios
          .map((s) => `${s.name} ${measured.get(s)!.rps.toFixed(0)}/s`)
          .join(', '),
    );
  }
  return results;
}

/** The load figures of one scenario over its rounds, as printed and written to the JSON files. */
export interface LoadRow {
  readonly scenario: string;
  readonly path: string;
  readonly baseline: string | undefined;
  readonly connections: number;
  /** Medians over the rounds. */
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly ratio: number;
  readonly ratioRange: readonly [number, number];
  readonly p99Ratio: number;
  /** Totals over the rounds. */
  readonly requests: number;
  readonly non2xx: number;
  /** Connection errors and timeouts. */
  readonly errors: number;
  readonly replayed: number;
  readonly statuses: Record<string, number>;
}

/** Medians and totals of the rounds of `scenario`. */
export function summarizeRounds(
  scenario: LoadScenario,
  result: Rounds<LoadResult>,
): LoadRow {
  const statuses: Record<string, number> = {};
  for (const round of result.rounds) {
    for (const [status, count] of Object.entries(round.statuses)) {
      statuses[status] = (statuses[status] ?? 0) + count;
    }
  }
  const total = (of: 'requests' | 'non2xx' | 'errors' | 'replayed') =>
    result.rounds.reduce((sum, round) => sum + round[of], 0);
  return {
    scenario: scenario.name,
    path: scenario.path,
    baseline: scenario.baseline?.name,
    connections: scenario.connections,
    rps: median(result.rounds.map((r) => r.rps)),
    p50: median(result.rounds.map((r) => r.p50)),
    p99: median(result.rounds.map((r) => r.p99)),
    ratio: median(result.ratios),
    ratioRange: [Math.min(...result.ratios), Math.max(...result.ratios)],
    p99Ratio: median(result.p99Ratios),
    requests: total('requests'),
    non2xx: total('non2xx'),
    errors: total('errors'),
    replayed: total('replayed'),
    statuses,
  };
}
