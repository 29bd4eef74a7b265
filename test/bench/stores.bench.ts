/**
 * Throughput of the idempotency module on each of its stores, and side by
 * side with @node-idempotency/nestjs on the same Redis.
 *
 * For each store (BENCH_STORES), the bench app (bench-app/stores-main.ts)
 * runs as a process of its own, on a database of its own on PostgreSQL (an
 * embedded server with fsync on, or DATABASE_URL), the module on that store:
 *
 *   PostgreSQL  the app of `npm run bench` as it is: the idempotent routes
 *               write through the module's transaction, which the record
 *               commits in
 *   Redis       BENCH_REDIS_URL, keys under a prefix of the run's own,
 *               deleted at the end
 *   DynamoDB    dynalite, in a process of its own
 *   memory      the in-memory store
 *
 * On the stores other than PostgreSQL the record cannot commit with the
 * handler's writes: there the idempotent routes do exactly what their
 * baselines do (the gateway, then the payment in a short transaction of
 * their own), `@Idempotent()` on top, so that the difference is the module.
 *
 * Scenarios, on each store, against the baseline named in brackets:
 *
 *   baseline          POST /bench/baseline: the gateway stand-in (no wait),
 *                     then the payment (one payment, two ledger rows, read
 *                     back) in one short plain transaction; no idempotency
 *   first execution   POST /bench/payments, @Idempotent(), a new key per
 *                     request [baseline]
 *   replay            the same route, every request a key that already
 *                     completed [baseline]
 *   gateway baseline  POST /bench/gateway-baseline: waits BENCH_GATEWAY_MS
 *                     (a payment gateway's answer) outside any transaction,
 *                     then the payment in a short transaction
 *   gateway           POST /bench/gateway, @Idempotent(), the same wait, then
 *                     the payment [gateway baseline]
 *
 * and on Redis, side by side with @node-idempotency/nestjs
 * (BENCH_NODE_IDEMPOTENCY, a version; installed at run time in a
 * temporary directory, with its Redis storage adapter: its peers are NestJS
 * 9 and 10, so it is no dependency of this repository; in the same NestJS 12
 * app, its CommonJS code finding the repository's NestJS through
 * NODE_PATH), on the same Redis:
 *
 *   theirs: first execution  POST /theirs/payments, the baseline's handler
 *                            under its @Idempotent(), a new key per request
 *                            [baseline]
 *   theirs: replay           the same route, keys that already completed
 *                            [baseline]
 *
 * and the no-op pair, where the handler answers at once and writes nothing,
 * so that what each library costs a request is most of the request:
 *
 *   no-op baseline           POST /bench/noop-baseline, no idempotency
 *   no-op                    POST /bench/noop, @Idempotent(), a new key per
 *                            request [no-op baseline]
 *   theirs: no-op            POST /theirs/noop, under theirs [no-op baseline]
 *
 * Before measuring, each idempotent payment route is checked to replay: a
 * request, the same again (201, Idempotent-Replayed: true, the same body,
 * one payment written), then the same key with another body (422
 * expected); printed.
 *
 * The scenarios of a store run interleaved, in rounds, each round starting
 * with another one; on Redis, ours and theirs of a kind of request run back
 * to back, each first every other round. Per scenario: req/s, p50 and p99 latency (medians of the
 * rounds) and the ratio to its baseline within each round (median); on
 * Redis, ours over theirs within each round (median), and what a request
 * of each cost in CPU: the app's process, the Redis server and the
 * PostgreSQL server (user + system time from `/proc`, each where it runs
 * on this machine; medians of the rounds, and of ours minus theirs within
 * each round), which tells a difference of a few per cent that throughput
 * on a loaded machine cannot. One table per store and the side-by-side one
 * go to the console, everything to a JSON file.
 *
 *   npm run bench:stores
 *   BENCH_STORES=redis BENCH_SECONDS=2 BENCH_ROUNDS=1 npm run bench:stores
 *
 * Settings (defaults), about 8 minutes in all on 2 cores:
 * BENCH_STORES=postgres,redis,dynamodb,memory BENCH_SECONDS=3 BENCH_ROUNDS=5
 * BENCH_CONNECTIONS=10 BENCH_GATEWAY_CONNECTIONS=50 BENCH_GATEWAY_MS=50
 * BENCH_WARMUP_SECONDS=1 BENCH_REPLAY_KEYS=1000
 * BENCH_REDIS_URL=redis://127.0.0.1:6379 BENCH_NODE_IDEMPOTENCY=1.0.4 (0: not
 * compared) BENCH_STORES_OUTPUT=dist-bench/stores-bench-results.json
 */
import { randomUUID } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { quiesce } from './app-state.js';
import {
  cpuNow,
  postmasterOf,
  withCpu,
  type CpuPerRequest,
  type CpuSources,
  type Measured,
} from './cpu-time.js';
import { onServer } from './database.js';
import {
  median,
  medianInterval,
  runLoad,
  type LoadResult,
  type MedianInterval,
} from './load.js';
import { cleanRedis, localRedisPid, serverName } from './redis-server.js';
import { checkReplay, printCheck, type ReplayCheck } from './replay-check.js';
import {
  completed,
  fresh,
  interleave,
  load,
  summarizeRounds,
  type LoadRow,
  type LoadScenario,
  type Rounds,
} from './scenario.js';
import { loadSettings } from './settings.js';
import { fixed, printTable } from './table.js';
import { installTheirs, type Theirs } from './theirs.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

// Shorter runs than bench.ts's: more scenarios, the same total time.
const SETTINGS = loadSettings({ seconds: 3, warmupSeconds: 1 });
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const THEIRS_VERSION = process.env.BENCH_NODE_IDEMPOTENCY ?? '1.0.4';
const OUTPUT =
  process.env.BENCH_STORES_OUTPUT ??
  `${ROOT}dist-bench/stores-bench-results.json`;

const STORE_NAMES = {
  postgres: 'PostgreSQL',
  redis: 'Redis',
  dynamodb: 'DynamoDB (dynalite)',
  memory: 'memory',
} as const;
type Store = keyof typeof STORE_NAMES;

const STORES = (
  process.env.BENCH_STORES ?? 'postgres,redis,dynamodb,memory'
).split(',') as Store[];
for (const store of STORES) {
  if (!(store in STORE_NAMES)) {
    throw new Error(
      `BENCH_STORES: unknown store ${store} (postgres, redis, dynamodb, memory)`,
    );
  }
}

/** A way of sending requests, measured in every round. */
interface Scenario extends LoadScenario {
  readonly baseline?: Scenario;
  /** Whether its requests are all replays (otherwise none is). */
  readonly replays: boolean;
}

const baseline: Scenario = {
  name: 'baseline',
  path: '/bench/baseline',
  connections: SETTINGS.connections,
  replays: false,
  keys: fresh('b'),
};
const first: Scenario = {
  name: 'first execution',
  path: '/bench/payments',
  connections: SETTINGS.connections,
  baseline,
  replays: false,
  keys: fresh('f'),
};
const replay: Scenario = {
  name: 'replay',
  path: '/bench/payments',
  connections: SETTINGS.connections,
  baseline,
  replays: true,
  keys: completed('r', SETTINGS.replayKeys),
};
const gatewayBaseline: Scenario = {
  name: 'gateway baseline',
  path: '/bench/gateway-baseline',
  connections: SETTINGS.gatewayConnections,
  replays: false,
  keys: fresh('gb'),
};
const gateway: Scenario = {
  name: 'gateway',
  path: '/bench/gateway',
  connections: SETTINGS.gatewayConnections,
  baseline: gatewayBaseline,
  replays: false,
  keys: fresh('g'),
};
const theirsFirst: Scenario = {
  name: 'theirs: first execution',
  path: '/theirs/payments',
  connections: SETTINGS.connections,
  baseline,
  replays: false,
  keys: fresh('tf'),
};
const theirsReplay: Scenario = {
  name: 'theirs: replay',
  path: '/theirs/payments',
  connections: SETTINGS.connections,
  baseline,
  replays: true,
  keys: completed('tr', SETTINGS.replayKeys),
};
const noopBaseline: Scenario = {
  name: 'no-op baseline',
  path: '/bench/noop-baseline',
  connections: SETTINGS.connections,
  replays: false,
  keys: fresh('nb'),
};
const noop: Scenario = {
  name: 'no-op',
  path: '/bench/noop',
  connections: SETTINGS.connections,
  baseline: noopBaseline,
  replays: false,
  keys: fresh('n'),
};
const theirsNoop: Scenario = {
  name: 'theirs: no-op',
  path: '/theirs/noop',
  connections: SETTINGS.connections,
  baseline: noopBaseline,
  replays: false,
  keys: fresh('tn'),
};
const SCENARIOS = [baseline, first, replay, gatewayBaseline, gateway];
/** On Redis, beside theirs. */
const SIDE_BY_SIDE = [
  theirsFirst,
  theirsReplay,
  noopBaseline,
  noop,
  theirsNoop,
];
/** Ours against theirs, round by round. */
const PAIRS = [
  { name: 'first execution', ours: first, theirs: theirsFirst, target: true },
  { name: 'replay', ours: replay, theirs: theirsReplay, target: true },
  // What each library costs a request, not a target: the module does more
  // for a request than theirs (see the README's comparison).
  { name: 'no-op handler', ours: noop, theirs: theirsNoop, target: false },
] as const;

/** Completes the keys of `scenario` (BENCH_REPLAY_KEYS) before its runs replay them. */
async function createReplayKeys(
  app: SampleProcess,
  scenario: Scenario,
): Promise<void> {
  const created = await runLoad({
    ...load(app, scenario, 'setup'),
    amount: SETTINGS.replayKeys,
  });
  if (
    created.statuses['201'] !== SETTINGS.replayKeys ||
    created.replayed !== 0
  ) {
    throw new Error(
      `creating the keys of ${scenario.name}: ${JSON.stringify(created.statuses)}, ${created.replayed} replayed`,
    );
  }
}

/** The figures of one scenario on one store, as printed and written. */
interface Row extends LoadRow {
  readonly store: string;
  /** Replays where none was expected, or the other way round. */
  readonly unexpected: number;
}

function summarize(
  store: Store,
  scenario: Scenario,
  result: Rounds<LoadResult>,
): Row {
  const row = summarizeRounds(scenario, result);
  return {
    store: STORE_NAMES[store],
    ...row,
    unexpected: scenario.replays ? row.requests - row.replayed : row.replayed,
  };
}

/** Ours over theirs on one kind of request, round by round. */
interface Pair {
  readonly name: string;
  /** Whether ours is meant to be at least as fast as theirs (a goal). */
  readonly target: boolean;
  readonly ours: Row;
  readonly theirs: Row;
  /** Medians over the rounds of ours over theirs. */
  readonly ratio: number;
  readonly p99Ratio: number;
  readonly ratios: number[];
  /** Where the median of ours over theirs lies, by the rounds (95 %). */
  readonly interval: MedianInterval;
  /** CPU a request of each process, where `/proc` shows it. */
  readonly cpu: Partial<Record<keyof CpuPerRequest, CpuPair>>;
}

/** One process's CPU a request under ours and theirs, over the rounds. */
interface CpuPair {
  /** Medians of the rounds (µs). */
  readonly ours: number;
  readonly theirs: number;
  /** Median of ours minus theirs within each round (µs). */
  readonly difference: number;
}

/** Ours and theirs of each process, where every round measured it. */
function cpuPairs(
  ours: readonly Measured[],
  theirs: readonly Measured[],
): Pair['cpu'] {
  const pairs: Pair['cpu'] = {};
  for (const of of ['app', 'redis', 'db'] as const) {
    const a = ours.map((round) => round.cpu[of]);
    const b = theirs.map((round) => round.cpu[of]);
    if ([...a, ...b].every((value) => value !== undefined)) {
      pairs[of] = {
        ours: median(a as number[]),
        theirs: median(b as number[]),
        difference: median(a.map((value, i) => value! - b[i]!)),
      };
    }
  }
  return pairs;
}

/** The postmaster of the server `database` is on, if it runs on this machine. */
async function localPostmaster(database: string): Promise<number | undefined> {
  const client = new pg.Client({ connectionString: database });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>(
      'SELECT pg_backend_pid() AS pid',
    );
    return postmasterOf(rows[0].pid);
  } finally {
    await client.end();
  }
}

/** What was measured on one store. */
interface StoreRun {
  readonly store: Store;
  readonly scenarios: readonly Scenario[];
  readonly rows: Row[];
  readonly results: Map<Scenario, Rounds<Measured>>;
  readonly checks: ReplayCheck[];
  readonly pairs: Pair[];
}

/** What the bench runs beside the apps, shared by every store. */
interface Shared {
  readonly serverUrl: string;
  readonly runId: string;
  readonly dynaliteUrl?: string;
  readonly theirs?: Theirs;
  /** The local Redis server's pid, for its CPU time. */
  readonly redisPid?: number;
}

/** Starts the app on `store`, checks its replays, and runs its rounds. */
async function benchStore(store: Store, shared: Shared): Promise<StoreRun> {
  const database = `idem_stores_${shared.runId}_${store}`;
  await onServer(shared.serverUrl, `CREATE DATABASE "${database}"`);
  const appUrl = new URL(shared.serverUrl);
  appUrl.pathname = `/${database}`;
  const theirs = store === 'redis' ? shared.theirs : undefined;
  const env: Record<string, string> = {
    DATABASE_URL: appUrl.href,
    // The in-process gateway stand-in: no gateway in the figures but the
    // gateway routes' wait.
    GATEWAY_URL: '',
    BENCH_GATEWAY_MS: String(SETTINGS.gatewayMs),
    BENCH_STORE: store,
    BENCH_REDIS_URL: REDIS_URL,
    BENCH_REDIS_PREFIX: `idempotency-bench-${shared.runId}:`,
    BENCH_DYNAMODB_ENDPOINT: shared.dynaliteUrl ?? '',
  };
  if (theirs) {
    Object.assign(env, {
      BENCH_NODE_IDEMPOTENCY_DIR: theirs.dir,
      BENCH_NODE_IDEMPOTENCY_PREFIX: `idempotency-bench-${shared.runId}-theirs`,
      // Its require('@nestjs/common') finds the repository's NestJS.
      NODE_PATH: `${ROOT}node_modules`,
    });
  }
  const scenarios = theirs ? [...SCENARIOS, ...SIDE_BY_SIDE] : SCENARIOS;
  let app: SampleProcess | undefined;
  try {
    app = await startSample(env, {
      entry: pathToFileURL(
        `${ROOT}dist-bench/test/bench/bench-app/stores-main.js`,
      ).href,
      ready: /Bench app listening on (http:\/\/\S+)/,
    });
    console.log(
      `\n${STORE_NAMES[store]}: bench app at ${app.url}, database ${database}; ` +
        `${scenarios.length} scenarios x ${SETTINGS.rounds} rounds x ${SETTINGS.seconds} s`,
    );
    const checks = [
      await checkReplay(
        app,
        appUrl.href,
        STORE_NAMES[store],
        'nestjs-idempotency',
        first.path,
      ),
    ];
    if (theirs) {
      checks.push(
        await checkReplay(
          app,
          appUrl.href,
          STORE_NAMES[store],
          `@node-idempotency/nestjs ${theirs.versions['@node-idempotency/nestjs']}`,
          theirsFirst.path,
        ),
      );
    }
    checks.forEach(printCheck);
    const failed = checks.filter((check) => !check.ok);
    if (failed.length > 0) {
      throw new Error(
        `${failed.map((check) => check.library).join(', ')} did not replay as expected on ${STORE_NAMES[store]}: not measured.`,
      );
    }
    for (const scenario of scenarios.filter((s) => s.replays)) {
      await createReplayKeys(app, scenario);
    }
    // Warm-up (JIT, pools, caches), not measured.
    for (const scenario of scenarios) {
      await runLoad({
        ...load(app, scenario, 'warmup'),
        seconds: SETTINGS.warmupSeconds,
      });
    }
    const sources: CpuSources = {
      app: app.process.pid,
      redis: store === 'redis' ? shared.redisPid : undefined,
      postmaster: await localPostmaster(appUrl.href),
    };
    const results = await interleave(
      scenarios,
      SETTINGS.rounds,
      async (scenario, round) => {
        await quiesce(app!);
        const before = cpuNow(sources);
        const result = await runLoad({
          ...load(app!, scenario, `${round}`),
          seconds: SETTINGS.seconds,
        });
        return withCpu(result, before, cpuNow(sources));
      },
      `${STORE_NAMES[store]} `,
      theirs ? PAIRS.map(({ ours, theirs: other }) => [ours, other]) : [],
    );
    const rows = scenarios.map((s) => summarize(store, s, results.get(s)!));
    const row = (scenario: Scenario) => rows[scenarios.indexOf(scenario)];
    const pairs: Pair[] = theirs
      ? PAIRS.map(({ name, ours, theirs: other, target }) => {
          const a = results.get(ours)!.rounds;
          const b = results.get(other)!.rounds;
          const ratios = a.map((round, i) => round.rps / b[i].rps);
          return {
            name,
            target,
            ours: row(ours),
            theirs: row(other),
            ratio: median(ratios),
            interval: medianInterval(ratios),
            p99Ratio: median(a.map((round, i) => round.p99 / b[i].p99)),
            ratios,
            cpu: cpuPairs(a, b),
          };
        })
      : [];
    return { store, scenarios, rows, results, checks, pairs };
  } finally {
    await app?.stop();
    await onServer(
      shared.serverUrl,
      `DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`,
    );
  }
}

const ratioCell = (value: number, of: Row) =>
  of.baseline === undefined ? 'base' : `${fixed(value, 2)}x`;

function report(runs: readonly StoreRun[], theirs: Theirs | undefined): void {
  console.log('');
  printTable(
    runs.flatMap((run) => run.rows),
    [
      ['store', -19, (r) => r.store],
      ['scenario', -23, (r) => r.scenario],
      ['conns', 5, (r) => String(r.connections)],
      ['req/s', 6, (r) => fixed(r.rps, 0)],
      ['p50 ms', 7, (r) => fixed(r.p50, 1)],
      ['p99 ms', 7, (r) => fixed(r.p99, 1)],
      ['vs base', 7, (r) => ratioCell(r.ratio, r)],
      ['p99 vs base', 11, (r) => ratioCell(r.p99Ratio, r)],
      ['replayed', 8, (r) => String(r.replayed)],
      [
        'non-2xx',
        8,
        (r) => `${r.non2xx}${r.errors ? ` +${r.errors} err` : ''}`,
      ],
    ],
  );
  console.log(
    `(${SETTINGS.rounds} rounds x ${SETTINGS.seconds} s per scenario, interleaved per store, medians of the rounds; vs base: ` +
      `ratio to the baseline of the same round, gateway to gateway baseline, the others to baseline; ` +
      `${SETTINGS.connections} connections, the gateway pair ${SETTINGS.gatewayConnections} with a ${SETTINGS.gatewayMs} ms gateway; ` +
      `on PostgreSQL the record commits in the handler's transaction, on the other stores the handler ` +
      `commits its own short transaction and the record is completed right after it)`,
  );
  if (runs.some((run) => run.store === 'dynamodb')) {
    console.log(
      "(DynamoDB: dynalite, an emulator in Node.js on the same cores as the app and the load: what the store costs against it, not against DynamoDB's service)",
    );
  }
  const wrong = runs
    .flatMap((run) => run.rows)
    .filter((r) => r.unexpected > 0 || r.non2xx > 0 || r.errors > 0);
  for (const r of wrong) {
    console.log(
      `WARNING ${r.store}, ${r.scenario}: ${r.non2xx} non-2xx, ${r.errors} errors, ` +
        `${r.unexpected} ${r.scenario.includes('replay') ? 'not replayed' : 'replayed'}`,
    );
  }

  const pairs = runs.flatMap((run) => run.pairs);
  if (!theirs || pairs.length === 0) {
    return;
  }
  const version = theirs.versions['@node-idempotency/nestjs'];
  console.log('');
  console.log(
    `Redis, side by side: one app (NestJS 12), one Redis, the same handler; ours: nestjs-idempotency ` +
      `(RedisIdempotencyStore, ioredis), theirs: @node-idempotency/nestjs ${version} ` +
      `(storage-adapter-redis ${theirs.versions['@node-idempotency/storage-adapter-redis']}, node-redis)`,
  );
  printTable(pairs, [
    ['request', -16, (p) => p.name],
    ['ours req/s', 10, (p) => fixed(p.ours.rps, 0)],
    ['theirs req/s', 12, (p) => fixed(p.theirs.rps, 0)],
    ['ours p50', 8, (p) => fixed(p.ours.p50, 1)],
    ['theirs p50', 10, (p) => fixed(p.theirs.p50, 1)],
    ['ours p99', 8, (p) => fixed(p.ours.p99, 1)],
    ['theirs p99', 10, (p) => fixed(p.theirs.p99, 1)],
    ['ours vs base', 12, (p) => `${fixed(p.ours.ratio, 2)}x`],
    ['theirs vs base', 14, (p) => `${fixed(p.theirs.ratio, 2)}x`],
    ['ours/theirs', 11, (p) => `${fixed(p.ratio, 2)}x`],
    ['p99 ours/theirs', 15, (p) => `${fixed(p.p99Ratio, 2)}x`],
  ]);
  console.log(
    '(ours/theirs: throughput of ours over theirs within each round, median; p99 likewise, lower is better)',
  );
  for (const pair of pairs) {
    const met = pair.ratio >= 1;
    const { low, high, coverage } = pair.interval;
    const where =
      `the median lies in ${fixed(low, 2)}x to ${fixed(high, 2)}x ` +
      `at ${fixed(coverage * 100, 0)} %; rounds ${pair.ratios.map((r) => r.toFixed(2)).join(', ')}`;
    console.log(
      pair.target
        ? `target: ${pair.name}: ours at least as fast as theirs: ${fixed(pair.ratio, 2)}x ` +
            `(${met ? 'met' : 'MISSED'}; ${where})`
        : `${pair.name}: ours over theirs ${fixed(pair.ratio, 2)}x (${where})`,
    );
  }
  for (const pair of pairs) {
    const parts = (
      [
        ['app', 'the app'],
        ['redis', 'Redis'],
        ['db', 'PostgreSQL'],
      ] as const
    ).flatMap(([of, name]) => {
      const cpu = pair.cpu[of];
      return cpu
        ? [
            `${name} ${fixed(cpu.ours, 0)} against ${fixed(cpu.theirs, 0)} ` +
              `(${cpu.difference >= 0 ? '+' : ''}${fixed(cpu.difference, 0)})`,
          ]
        : [];
    });
    if (parts.length > 0) {
      console.log(
        `CPU a request, ${pair.name}, ours against theirs (µs; medians of the rounds, and of ours minus theirs within each round): ${parts.join('; ')}`,
      );
    }
  }
}

/** The PostgreSQL server's version. */
async function serverVersion(serverUrl: string): Promise<string> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ version: string }>(
      "SELECT current_setting('server_version') AS version",
    );
    return rows[0].version;
  } finally {
    await client.end();
  }
}

async function main(): Promise<void> {
  const runId = randomUUID().replaceAll('-', '').slice(0, 12);
  const server = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ durable: true });
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  let redis: Redis | undefined;
  let dynalite: SampleProcess | undefined;
  let theirs: Theirs | undefined;
  let theirsSkipped: string | undefined;
  try {
    if (STORES.includes('redis')) {
      redis = new Redis(REDIS_URL, {
        lazyConnect: true,
        maxRetriesPerRequest: 1,
      });
      await redis.connect().catch((error: unknown) => {
        throw new Error(
          `Redis at ${REDIS_URL} is not reachable (set BENCH_REDIS_URL, or leave redis out of BENCH_STORES)`,
          { cause: error },
        );
      });
      if (THEIRS_VERSION === '0') {
        theirsSkipped = 'BENCH_NODE_IDEMPOTENCY=0';
      } else {
        try {
          theirs = await installTheirs(THEIRS_VERSION);
          console.log(
            `installed ${Object.entries(theirs.versions)
              .map(([name, version]) => `${name} ${version}`)
              .join(', ')} in a temporary directory`,
          );
        } catch (error) {
          theirsSkipped = `npm install failed: ${error instanceof Error ? error.message : String(error)}`;
          console.warn(
            `@node-idempotency/nestjs not compared: ${theirsSkipped}`,
          );
        }
      }
    }
    if (STORES.includes('dynamodb')) {
      dynalite = await startSample(
        {},
        {
          entry: pathToFileURL(
            `${ROOT}dist-bench/test/bench/dynalite-server.js`,
          ).href,
          ready: /dynalite listening on (http:\/\/\S+)/,
        },
      );
    }
    const shared: Shared = {
      serverUrl,
      runId,
      dynaliteUrl: dynalite?.url,
      theirs,
      redisPid: redis ? await localRedisPid(redis) : undefined,
    };
    const machine = {
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      loadAverage: loadavg()
        .map((load) => load.toFixed(2))
        .join(' '),
      node: process.version,
      postgres: `${await serverVersion(serverUrl)} (${server ? 'embedded, fsync on' : 'DATABASE_URL'})`,
      redis: redis ? serverName(await redis.info('server')) : undefined,
    };
    const runs: StoreRun[] = [];
    for (const store of STORES) {
      runs.push(await benchStore(store, shared));
    }
    report(runs, theirs);
    console.log(
      `machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, load average before ` +
        `${machine.loadAverage}; Node ${machine.node}; PostgreSQL ${machine.postgres}` +
        `${machine.redis ? `; ${machine.redis}` : ''}`,
    );
    const json = {
      date: new Date().toISOString(),
      machine,
      settings: {
        stores: STORES,
        ...SETTINGS,
        gateway: 'in-process stand-in',
        nodeIdempotency: theirs?.versions ?? { skipped: theirsSkipped },
      },
      stores: runs.map((run) => ({
        store: STORE_NAMES[run.store],
        checks: run.checks,
        scenarios: run.rows.map((row, i) => ({
          ...row,
          ...run.results.get(run.scenarios[i]),
        })),
      })),
      sideBySide: runs.flatMap((run) => run.pairs),
    };
    await mkdir(dirname(OUTPUT), { recursive: true });
    await writeFile(OUTPUT, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`\nresults written to ${OUTPUT}`);
  } finally {
    await dynalite?.stop();
    if (redis) {
      await cleanRedis(redis, runId);
      await redis.quit();
    }
    if (theirs) {
      await rm(theirs.dir, { recursive: true, force: true });
    }
    await server?.stop();
  }
}

await main();
