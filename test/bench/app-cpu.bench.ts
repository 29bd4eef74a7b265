/**
 * The application's side of two or more modes of the modes bench
 * (bench-app/modes-main.ts), at one request rate: CPU a request by thread
 * of each mode's app (the JavaScript thread; V8's helper threads, which
 * collect garbage and compile; libuv's), and, with `BENCH_PROFILE=1`,
 * V8's sampling profile of the JavaScript thread by where the code comes
 * from (the library, a package, Node.js's own modules, the garbage
 * collector) and by function.
 *
 * Where `npm run bench:modes` compares throughput at full speed, this
 * tells where an app's CPU goes at the same load: each app warmed alone
 * first (V8 goes on compiling for thousands of requests), then windows of
 * `BENCH_RATE x BENCH_SECONDS` requests, the modes alternated, in the
 * reverse order every other round. Figures: medians of the rounds, and of
 * the rounds' differences against the first mode. The profiler's own work
 * inflates what it measures (the JavaScript thread about a sixth here, and
 * the sampler's thread besides): compare the modes with each other, not
 * with the figures read without it.
 *
 *   npm run build && tsc -p test/bench/tsconfig.json && node dist-bench/test/bench/app-cpu.bench.js
 *   BENCH_PROFILE=1 BENCH_APP_MODES=postgres,lean node dist-bench/test/bench/app-cpu.bench.js
 *
 * Settings (defaults): BENCH_APP_MODES=postgres,floor (the module against
 * the same statements sent by a plain route: what the module does in the
 * app) BENCH_SETTING=light (or gateway) BENCH_RATE=600 BENCH_SECONDS=6
 * BENCH_ROUNDS=4 BENCH_WARMUP_REQUESTS=10500 BENCH_CONNECTIONS=16
 * BENCH_GATEWAY_MS=50 BENCH_PROFILE (unset: no profile)
 * BENCH_PROFILE_INTERVAL_US=100 BENCH_PROFILE_FUNCTIONS=25; DATABASE_URL
 * (unset: an embedded PostgreSQL with fsync on).
 */
import { randomUUID } from 'node:crypto';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import type { SampleProcess } from '../utils/sample-process.js';
import { threadCpuMs } from './cpu-time.js';
import { onServer } from './database.js';
import { makeModeDatabases, startModeApp } from './mode-apps.js';
import { median, runLoad } from './load.js';
import { BODY } from './scenario.js';
import { setting } from './settings.js';
import { fixed, printTable, type Column } from './table.js';
import { attachProfiler, selfTimes, type SelfTimes } from './v8-profile.js';

const MODES = (process.env.BENCH_APP_MODES ?? 'postgres,floor').split(',');
const SETTING = process.env.BENCH_SETTING ?? 'light';
const RATE = setting('BENCH_RATE', 600);
const SECONDS = setting('BENCH_SECONDS', 6);
const ROUNDS = setting('BENCH_ROUNDS', 4);
const WARMUP = setting('BENCH_WARMUP_REQUESTS', 10_500);
const CONNECTIONS = setting('BENCH_CONNECTIONS', 16);
const GATEWAY_MS = setting('BENCH_GATEWAY_MS', 50, 0);
const PROFILE = Boolean(process.env.BENCH_PROFILE);
const INTERVAL_US = setting('BENCH_PROFILE_INTERVAL_US', 100);
const FUNCTIONS = setting('BENCH_PROFILE_FUNCTIONS', 25, 0);
const DEBUGGER = /Debugger listening on (ws:\/\/\S+)/;

/** What one window of one mode measured, a request's share. */
interface Window {
  /** µs of CPU by kind of thread, and `total`. */
  readonly threads: Record<string, number>;
  /** µs of the JavaScript thread's self time by origin and by function. */
  readonly byOrigin: SelfTimes;
  readonly byFunction: SelfTimes;
}

/** One mode's app: its process, and its inspector's address if profiled. */
interface App {
  readonly mode: string;
  readonly sample: SampleProcess;
  readonly inspector?: string;
}

/** `times` divided by `requests`, in µs a request. */
function perRequest(
  times: Record<string, number>,
  requests: number,
  scale = 1,
): Record<string, number> {
  return Object.fromEntries(
    Object.entries(times).map(([key, value]) => [
      key,
      (value * scale) / requests,
    ]),
  );
}

/** Runs `requests` requests on `app` (at {@link RATE}, or as fast as it goes). */
async function drive(app: App, requests: number, rate?: number) {
  const run = randomUUID();
  let n = 0;
  return runLoad({
    url: app.sample.url,
    path: `/modes/${SETTING}`,
    body: BODY,
    connections: CONNECTIONS,
    key: () => `app-cpu-${run}-${n++}`,
    amount: requests,
    rate,
  });
}

/** One measured window of `app`. */
async function measure(app: App): Promise<Window> {
  const pid = app.sample.process.pid!;
  const profiler = app.inspector
    ? await attachProfiler(app.inspector)
    : undefined;
  await profiler?.start(INTERVAL_US);
  const before = threadCpuMs(pid);
  const result = await drive(app, RATE * SECONDS, RATE);
  const after = threadCpuMs(pid);
  const profile = await profiler?.stop();
  profiler?.close();
  if (result.non2xx > 0 || result.errors > 0) {
    throw new Error(
      `${app.mode}: ${JSON.stringify(result.statuses)}, ${result.errors} errors`,
    );
  }
  const threads: Record<string, number> = {};
  for (const [kind, ms] of Object.entries(after)) {
    threads[kind] = ms - (before[kind] ?? 0);
  }
  threads.total = Object.values(threads).reduce((sum, ms) => sum + ms, 0);
  const times = profile ? selfTimes(profile) : { byOrigin: {}, byFunction: {} };
  return {
    threads: perRequest(threads, result.requests, 1000),
    byOrigin: perRequest(times.byOrigin, result.requests),
    byFunction: perRequest(times.byFunction, result.requests),
  };
}

/** The medians of `key`'s figures and of their differences against the first mode's. */
function summarize(
  windows: Map<string, Window[]>,
  field: 'threads' | 'byOrigin' | 'byFunction',
  keys: readonly string[],
): Array<{ key: string; medians: number[]; differences: number[] }> {
  const [first] = MODES;
  return keys.map((key) => ({
    key,
    medians: MODES.map((mode) =>
      median(windows.get(mode)!.map((w) => w[field][key] ?? 0)),
    ),
    differences: MODES.slice(1).map((mode) =>
      median(
        windows
          .get(mode)!
          .map(
            (w, round) =>
              (windows.get(first)![round][field][key] ?? 0) -
              (w[field][key] ?? 0),
          ),
      ),
    ),
  }));
}

/** Prints `field`'s figures, the largest differences first, at most `limit` rows. */
function print(
  title: string,
  windows: Map<string, Window[]>,
  field: 'threads' | 'byOrigin' | 'byFunction',
  limit = Infinity,
): void {
  const keys = [
    ...new Set(
      [...windows.values()].flat().flatMap((w) => Object.keys(w[field])),
    ),
  ];
  const rows = summarize(windows, field, keys)
    .filter(({ medians }) => medians.some((us) => us >= 0.05))
    .sort(
      (a, b) =>
        Math.abs(b.differences[0] ?? 0) - Math.abs(a.differences[0] ?? 0),
    )
    .slice(0, limit);
  console.log(`\n${title}`);
  const width = Math.max(12, ...rows.map(({ key }) => key.length));
  printTable(rows, [
    [field === 'byFunction' ? 'function' : 'what', -width, (row) => row.key],
    ...MODES.map((mode, i): Column<(typeof rows)[number]> => [
      mode,
      Math.max(9, mode.length),
      (row) => fixed(row.medians[i], 1),
    ]),
    ...MODES.slice(1).map((mode, i): Column<(typeof rows)[number]> => {
      const title = `${MODES[0]} - ${mode}`;
      return [
        title,
        title.length,
        (row) =>
          `${row.differences[i] >= 0 ? '+' : ''}${fixed(row.differences[i], 1)}`,
      ];
    }),
  ]);
}

async function main(): Promise<void> {
  if (MODES.length < 2) {
    throw new Error('BENCH_APP_MODES names at least two modes');
  }
  const server = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ durable: true });
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  const database = `idem_app_cpu_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const env = {
    GATEWAY_URL: '',
    BENCH_GATEWAY_MS: String(GATEWAY_MS),
    DATABASE_POOL_IDLE_MS: '0',
  };
  const made: string[] = [];
  const apps: App[] = [];
  try {
    const urls = await makeModeDatabases(serverUrl, database, MODES, env, made);
    for (const mode of MODES) {
      const sample = await startModeApp(
        mode,
        { ...env, DATABASE_URL: urls.get(mode)! },
        PROFILE ? ['--inspect=127.0.0.1:0'] : [],
      );
      apps.push({
        mode,
        sample,
        inspector: PROFILE ? DEBUGGER.exec(sample.output())?.[1] : undefined,
      });
    }
    for (const app of apps) {
      const warm = await drive(app, WARMUP);
      console.log(
        `${app.mode}: warmed with ${warm.requests} requests (${fixed(warm.rps, 0)} req/s alone)`,
      );
    }
    const windows = new Map<string, Window[]>(MODES.map((m) => [m, []]));
    for (let round = 0; round < ROUNDS; round += 1) {
      for (const app of round % 2 === 0 ? apps : [...apps].reverse()) {
        const window = await measure(app);
        windows.get(app.mode)!.push(window);
        console.log(
          `round ${round + 1}/${ROUNDS} ${app.mode}: ` +
            Object.entries(window.threads)
              .filter(([, us]) => us >= 1)
              .map(([kind, us]) => `${kind} ${fixed(us, 0)} µs`)
              .join(', '),
        );
      }
    }
    console.log(
      `\n${SETTING} route, ${RATE} requests a second over ${CONNECTIONS} connections, ` +
        `${ROUNDS} rounds of ${RATE * SECONDS} requests a mode, each app warmed with ${WARMUP}` +
        (PROFILE ? `; profiled every ${INTERVAL_US} µs` : ''),
    );
    print('CPU a request by thread, µs (/proc)', windows, 'threads');
    if (PROFILE) {
      print(
        'the JavaScript thread, self time a request by origin, µs (V8 profile)',
        windows,
        'byOrigin',
      );
      print(
        `the ${FUNCTIONS} functions whose self time differs most, µs a request`,
        windows,
        'byFunction',
        FUNCTIONS,
      );
    }
  } finally {
    for (const app of apps) {
      await app.sample.stop();
    }
    for (const db of made.reverse()) {
      await onServer(serverUrl, `DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`);
    }
    await server?.stop();
  }
}

await main();
