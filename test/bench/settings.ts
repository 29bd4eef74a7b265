/**
 * A numeric setting of a bench from the environment (`BENCH_*`), or
 * `fallback`; refuses anything that is not a number of at least `min`.
 */
export function setting(name: string, fallback: number, min = 1): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(value) || value < min) {
    throw new Error(`${name} must be a number of at least ${min}`);
  }
  return value;
}

/** The settings of the load runs, the same variables in every bench. */
export interface LoadSettings {
  /** Seconds of each timed run (`BENCH_SECONDS`). */
  readonly seconds: number;
  /** Rounds of every scenario (`BENCH_ROUNDS`, 5). */
  readonly rounds: number;
  /** Connections of the scenarios without a gateway wait (`BENCH_CONNECTIONS`, 10 unless a bench says). */
  readonly connections: number;
  /** Connections of the gateway pair (`BENCH_GATEWAY_CONNECTIONS`, 50). */
  readonly gatewayConnections: number;
  /** The gateway's answer, in ms (`BENCH_GATEWAY_MS`, 50). */
  readonly gatewayMs: number;
  /** Seconds of warm-up per scenario (`BENCH_WARMUP_SECONDS`). */
  readonly warmupSeconds: number;
  /** Keys completed before the rounds, that replays cycle through (`BENCH_REPLAY_KEYS`, 1000). */
  readonly replayKeys: number;
}

/**
 * The load settings from the environment, with a bench's own defaults for
 * its lengths (and its connections without a gateway wait, 10 otherwise).
 */
export function loadSettings(defaults: {
  seconds: number;
  warmupSeconds: number;
  connections?: number;
}): LoadSettings {
  return {
    seconds: setting('BENCH_SECONDS', defaults.seconds),
    rounds: setting('BENCH_ROUNDS', 5),
    connections: setting('BENCH_CONNECTIONS', defaults.connections ?? 10),
    gatewayConnections: setting('BENCH_GATEWAY_CONNECTIONS', 50),
    gatewayMs: setting('BENCH_GATEWAY_MS', 50, 0),
    warmupSeconds: setting('BENCH_WARMUP_SECONDS', defaults.warmupSeconds),
    replayKeys: setting('BENCH_REPLAY_KEYS', 1000),
  };
}
