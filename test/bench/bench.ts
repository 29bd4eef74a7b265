/**
 * Throughput and cost of the idempotency module: a test-only application
 * (bench-app/: the sample app plus the routes below) as a real process on
 * PostgreSQL (fsync on), driven over loopback by autocannon.
 *
 * Scenarios, each against the baseline named in brackets:
 *
 *   baseline          POST /bench/baseline: the gateway stand-in (no wait), then
 *                     the payment (one payment, two ledger rows, read back) in
 *                     one short plain transaction; no idempotency
 *   first execution   POST /bench/payments: the same as an @Idempotent() handler,
 *                     every request a new key [baseline]
 *   replay            POST /bench/payments, every request a key that already
 *                     completed [baseline]
 *   contended         POST /bench/payments, all connections on a few keys at a
 *                     time [baseline]
 *   with step         POST /payments: the sample's real route, whose charge is a
 *                     recovery point [baseline]
 *   gateway baseline  POST /bench/gateway-baseline: waits BENCH_GATEWAY_MS (a
 *                     payment gateway's answer), outside any transaction, then
 *                     the payment in one short plain transaction
 *   gateway           POST /bench/gateway: @Idempotent(), waits, then the payment
 *                     through the injected repositories (the module's
 *                     transaction) [gateway baseline]
 *
 * A baseline is what an application without the module would write: the
 * gateway first, then a short transaction (never a gateway call inside it).
 * The gateway pair runs with BENCH_GATEWAY_CONNECTIONS connections, the
 * others with BENCH_CONNECTIONS; the app's pool has DATABASE_POOL_SIZE
 * connections (the sample's default, 10).
 *
 * 1. Load: the scenarios run interleaved, in rounds, each round starting with
 *    another one. Per scenario: req/s, p50 and p99 latency (medians of the
 *    rounds), and its ratio to its baseline taken within each round (median;
 *    for p99 as for req/s). Meanwhile, the most pooled connections the app
 *    held at once: the app itself counts the checkouts of its `pg` pool
 *    (acquire/release events; the module borrows from that pool too) and
 *    reports the maximum per run (POST /bench/pool); as a cross-check, a
 *    session on another database samples pg_stat_activity every
 *    BENCH_SAMPLE_MS for the app's sessions that are not idle (active, or
 *    idle in transaction), which misses checkouts shorter than the interval.
 * 2. Cost: each scenario at the same fixed rate (BENCH_COST_RATE req/s): CPU
 *    time of the app process and of the whole PostgreSQL server (/proc; the
 *    server only when it is the bench's own) per request.
 * 3. Counts: BENCH_COUNT_REQUESTS requests per scenario, one at a time (one
 *    connection; contended with its own), alone on the database, twice,
 *    keeping the pass with fewer commits, then fewer WAL flushes (the
 *    server's own work only adds: autovacuum commits too, and a backend
 *    that writes the end of a WAL segment flushes it, so a synchronous
 *    count can be 1/BENCH_COUNT_REQUESTS high, and the asynchronous one as
 *    much low):
 *    - statements: pg_stat_statements, top level, BEGIN/COMMIT/ROLLBACK
 *      included;
 *    - commits: pg_stat_database.xact_commit (sessions' start-ups excluded),
 *      split in three:
 *      - synchronous: WAL flushes. A synchronous commit of a transaction that
 *        wrote flushes the WAL in its own backend before it returns; an
 *        asynchronous one (synchronous_commit off, e.g. set transaction-
 *        locally by set_config('synchronous_commit', 'off', true)) leaves it
 *        to the WAL writer. On PostgreSQL 18+ the flushes of client backends
 *        are counted apart (pg_stat_io, object wal, fsyncs), so with one
 *        request at a time, each is one synchronous commit. Before 18 only
 *        pg_stat_wal.wal_sync exists, which counts the WAL writer's flushes
 *        too: printed as an upper bound (<=). With concurrent requests
 *        (contended) one flush can cover several commits (group commit):
 *        printed as a lower bound (>=);
 *      - asynchronous: commit records in the WAL (pg_walinspect: the
 *        transactions that wrote) less the synchronous ones;
 *      - read-only: the remaining commits, which wrote nothing and so have
 *        nothing to flush (an autocommit SELECT, for one);
 *      the split is checked first, before the app starts, on transactions of
 *      known kinds on the app's database (synchronous INSERTs, INSERTs with
 *      set_config('synchronous_commit', 'off', true) in the statement,
 *      SELECTs), and the check printed with the tables;
 *    - rollbacks: pg_stat_database.xact_rollback;
 *    - refusal: a request held in progress on one key (POST /bench/held, until
 *      POST /bench/release) while BENCH_COUNT_REQUESTS more with that key
 *      are refused (409), one at a time; the held request's own execution is
 *      subtracted using the first execution's counts (same module path, same
 *      writes).
 *    The WAL figures are the whole server's: exact on the embedded server,
 *    inflated by other databases' work on a shared one (DATABASE_URL).
 *
 * Before each run and each count, the bench waits until the app handles no
 * request and holds no connection (POST /bench/pool tells): the handlers of
 * a finished run's last requests would otherwise count in the next one.
 *
 * One table goes to the console with the targets next to the figures,
 * everything to a JSON file.
 *
 *   npm run bench                              (embedded PostgreSQL 18, fsync on)
 *   DATABASE_URL=postgres://... npm run bench  (statements need pg_stat_statements
 *                                               preloaded there; asynchronous and
 *                                               read-only commits, pg_walinspect
 *                                               (PostgreSQL 15+) and a superuser)
 *
 * Settings (defaults), about 5 minutes in all:
 * BENCH_SECONDS=4 BENCH_ROUNDS=5 BENCH_CONNECTIONS=10
 * BENCH_GATEWAY_CONNECTIONS=50 BENCH_GATEWAY_MS=50 BENCH_WARMUP_SECONDS=2
 * BENCH_COST_RATE=100 BENCH_COST_SECONDS=4 BENCH_COUNT_REQUESTS=200
 * BENCH_REPLAY_KEYS=1000 BENCH_CONTENDED_KEYS=5 BENCH_CONTENDED_REPEATS=10
 * BENCH_SAMPLE_MS=20 BENCH_OUTPUT=dist-bench/bench-results.json
 * DATABASE_POOL_SIZE=10 (the app's pool)
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { quiesce, readPool } from './app-state.js';
import { postmasterOf, processCpuMs, serverCpuMs } from './cpu-time.js';
import { onServer } from './database.js';
import { runLoad, type LoadResult } from './load.js';
import {
  ActivitySampler,
  ServerCounters,
  type ServerCounts,
  type WalFlushSource,
} from './server-counters.js';
import {
  BODY,
  completed,
  fresh,
  interleave,
  load,
  summarizeRounds,
  type LoadRow,
  type LoadScenario,
  type Rounds,
} from './scenario.js';
import { loadSettings, setting } from './settings.js';
import { fixed, printTable } from './table.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const LOAD = loadSettings({ seconds: 4, warmupSeconds: 2 });
const {
  seconds: SECONDS,
  rounds: ROUNDS,
  connections: CONNECTIONS,
  gatewayConnections: GATEWAY_CONNECTIONS,
  gatewayMs: GATEWAY_MS,
  warmupSeconds: WARMUP_SECONDS,
  replayKeys: REPLAY_KEYS,
} = LOAD;
const COUNT_REQUESTS = setting('BENCH_COUNT_REQUESTS', 200);
const CONTENDED_KEYS = setting('BENCH_CONTENDED_KEYS', 5);
const CONTENDED_REPEATS = setting('BENCH_CONTENDED_REPEATS', 10);
const COST_RATE = setting('BENCH_COST_RATE', 100);
const COST_SECONDS = setting('BENCH_COST_SECONDS', 4);
const SAMPLE_MS = setting('BENCH_SAMPLE_MS', 20);
const OUTPUT =
  process.env.BENCH_OUTPUT ?? `${ROOT}dist-bench/bench-results.json`;

/** A way of sending requests, measured in every round, and counted. */
interface Scenario extends LoadScenario {
  /** Connections of its counting pass. */
  readonly countConnections: number;
  readonly baseline?: Scenario;
}

const baseline: Scenario = {
  name: 'baseline',
  path: '/bench/baseline',
  connections: CONNECTIONS,
  countConnections: 1,
  keys: fresh('b'),
};
const first: Scenario = {
  name: 'first execution',
  path: '/bench/payments',
  connections: CONNECTIONS,
  countConnections: 1,
  baseline,
  keys: fresh('f'),
};
const replay: Scenario = {
  name: 'replay',
  path: '/bench/payments',
  connections: CONNECTIONS,
  countConnections: 1,
  baseline,
  keys: completed('r', REPLAY_KEYS),
};
const contended: Scenario = {
  name: 'contended',
  path: '/bench/payments',
  connections: CONNECTIONS,
  // Contention needs concurrent requests.
  countConnections: CONNECTIONS,
  baseline,
  keys: (run) => {
    // CONTENDED_KEYS keys at a time, each sent CONTENDED_REPEATS times by
    // whichever connections come next, then the next set of keys.
    let n = 0;
    return () => {
      const i = n++;
      const set = Math.floor(i / (CONTENDED_KEYS * CONTENDED_REPEATS));
      return `c-${run}-${set}-${i % CONTENDED_KEYS}`;
    };
  },
};
const withStep: Scenario = {
  name: 'with step (POST /payments)',
  path: '/payments',
  connections: CONNECTIONS,
  countConnections: 1,
  baseline,
  keys: fresh('s'),
};
const gatewayBaseline: Scenario = {
  name: 'gateway baseline',
  path: '/bench/gateway-baseline',
  connections: GATEWAY_CONNECTIONS,
  countConnections: 1,
  keys: fresh('gb'),
};
const gateway: Scenario = {
  name: 'gateway',
  path: '/bench/gateway',
  connections: GATEWAY_CONNECTIONS,
  countConnections: 1,
  baseline: gatewayBaseline,
  keys: fresh('g'),
};
const SCENARIOS = [
  baseline,
  first,
  replay,
  contended,
  withStep,
  gatewayBaseline,
  gateway,
];

/** One timed run of a scenario. */
interface RunResult extends LoadResult {
  /** Milliseconds of CPU of the app process per request. */
  readonly appCpu: number | undefined;
  /** Milliseconds of CPU of the whole PostgreSQL server per request (its own server only). */
  readonly dbCpu: number | undefined;
  /** The most pooled connections the app held at once (its pool's count). */
  readonly poolMax?: number;
  /** The most busy sessions of the app's database seen at once (pg_stat_activity samples). */
  readonly sampledMax?: number;
  readonly samples?: number;
}

/** What was counted for a scenario: the server's counts over `requests` requests. */
interface Counted {
  readonly counts: ServerCounts;
  readonly requests: number;
  readonly statuses: Readonly<Record<string, number>>;
}

/** What one scenario measured over all rounds. */
interface ScenarioResult extends Rounds<RunResult> {
  /** A run at the same fixed rate for every scenario: what a request costs. */
  cost?: RunResult;
  counted?: Counted;
}

/** The app under load, and what watches it. */
interface Bench {
  readonly app: SampleProcess;
  /** Where the CPU time of a run is read from. */
  readonly appPid: number | undefined;
  readonly postmaster: number | undefined;
  readonly sampler: ActivitySampler;
}

/**
 * Runs `scenario` for `seconds` and reads the CPU time the app and the
 * server spent; with `watch`, the connections the app held too.
 */
async function timed(
  bench: Bench,
  scenario: Scenario,
  run: string,
  seconds: number,
  { rate, watch = false }: { rate?: number; watch?: boolean } = {},
): Promise<RunResult> {
  await quiesce(bench.app);
  if (watch) {
    await readPool(bench.app);
    bench.sampler.start();
  }
  const app0 = processCpuMs(bench.appPid);
  const db0 = serverCpuMs(bench.postmaster);
  const result = await runLoad({
    ...load(bench.app, scenario, run),
    seconds,
    rate,
  });
  const app1 = processCpuMs(bench.appPid);
  const db1 = serverCpuMs(bench.postmaster);
  const perRequest = (before?: number, after?: number) =>
    before === undefined || after === undefined || result.requests === 0
      ? undefined
      : (after - before) / result.requests;
  const measured: RunResult = {
    ...result,
    appCpu: perRequest(app0, app1),
    dbCpu: perRequest(db0, db1),
  };
  if (!watch) {
    return measured;
  }
  const sampled = await bench.sampler.stop();
  const pool = await readPool(bench.app);
  return {
    ...measured,
    poolMax: pool.maxHeld,
    sampledMax: sampled.max,
    samples: sampled.samples,
  };
}

/** The machine and server the figures come from. */
type Machine = Awaited<ReturnType<typeof machine>>;

async function machine(counters: ServerCounters) {
  const [server] = await counters.query<Record<string, string>>(
    `SELECT current_setting('server_version') AS version,
            current_setting('fsync') AS fsync,
            current_setting('synchronous_commit') AS synchronous_commit,
            current_setting('wal_sync_method') AS wal_sync_method,
            current_setting('shared_buffers') AS shared_buffers,
            current_setting('max_connections') AS max_connections`,
  );
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverage: loadavg()
      .map((load) => load.toFixed(2))
      .join(' '),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    postgres: server.version,
    fsync: server.fsync,
    synchronousCommit: server.synchronous_commit,
    walSyncMethod: server.wal_sync_method,
    sharedBuffers: server.shared_buffers,
    server: process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded',
  };
}

/** How far a synchronous-commit count can be trusted. */
type Bound = 'exact' | 'at least' | 'at most' | 'unknown';

/** What a request costs the server, from a counting pass. */
interface PerRequest {
  readonly statements: number | undefined;
  readonly commits: number;
  readonly syncCommits: number | undefined;
  readonly asyncCommits: number | undefined;
  readonly readOnlyCommits: number | undefined;
  /** How {@link syncCommits} (and so {@link asyncCommits}, the other way) is bounded. */
  readonly syncBound: Bound;
  readonly rollbacks: number;
  readonly execMs: number | undefined;
  readonly planMs: number | undefined;
  readonly walBytes: number | undefined;
}

/**
 * Per request, from `counts` over `requests` requests, less one request
 * costing `less` (the held request of the refusal count).
 */
function perRequest(
  counts: ServerCounts,
  requests: number,
  concurrent: boolean,
  flushSource: WalFlushSource,
  less?: PerRequest,
): PerRequest {
  const per = (
    value: number | undefined,
    minus: number | undefined,
  ): number | undefined =>
    value === undefined || (less && minus === undefined) || requests === 0
      ? undefined
      : (value - (minus ?? 0)) / requests;
  const plus = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? undefined : a + b;
  const flushBound: Bound =
    flushSource === 'client backends' ? 'exact' : 'at most';
  const syncBound: Bound =
    counts.walFlushes === undefined
      ? 'unknown'
      : !concurrent
        ? flushBound
        : flushBound === 'exact'
          ? 'at least'
          : 'unknown';
  const sync = per(counts.walFlushes, less?.syncCommits);
  const writes = per(
    counts.walCommits,
    less && plus(less.syncCommits, less.asyncCommits),
  );
  const commits = per(counts.commits, less?.commits) ?? NaN;
  return {
    statements: per(counts.statements, less?.statements),
    commits,
    syncCommits: syncBound === 'unknown' ? undefined : sync,
    asyncCommits:
      syncBound === 'unknown' || writes === undefined || sync === undefined
        ? undefined
        : writes - sync,
    readOnlyCommits: writes === undefined ? undefined : commits - writes,
    syncBound: less ? worse(syncBound, less.syncBound) : syncBound,
    rollbacks: per(counts.rollbacks, less?.rollbacks) ?? NaN,
    execMs: per(counts.execMs, less?.execMs),
    planMs: per(counts.planMs, less?.planMs),
    walBytes: per(counts.walBytes, less?.walBytes),
  };
}

/** The bound of a difference of two bounded counts. */
function worse(a: Bound, b: Bound): Bound {
  return a === 'exact' ? b : b === 'exact' || a === b ? a : 'unknown';
}

/** A synchronous-commit count as printed: `>=0.10` for a lower bound. */
function bounded(value: number | undefined, bound: Bound, digits = 2): string {
  const prefix = bound === 'at least' ? '>=' : bound === 'at most' ? '<=' : '';
  return value === undefined ? 'n/a' : `${prefix}${value.toFixed(digits)}`;
}

/** The same count the other way round (asynchronous = writes - synchronous). */
const opposite = (bound: Bound): Bound =>
  bound === 'at least' ? 'at most' : bound === 'at most' ? 'at least' : bound;

/** The figures of one load scenario, as printed and written to the JSON file. */
interface Row extends LoadRow {
  /** The most pooled connections held at once, over all rounds. */
  readonly poolMax: number | undefined;
  readonly sampledMax: number | undefined;
  /** CPU milliseconds per request at the same fixed rate for every scenario. */
  readonly appCpuMsPerRequest: number | undefined;
  readonly dbCpuMsPerRequest: number | undefined;
  /** The rate that run achieved. */
  readonly costRps: number | undefined;
  /** From the counting pass. */
  readonly perRequest: PerRequest | undefined;
}

function summarize(
  scenario: Scenario,
  result: ScenarioResult,
  flushSource: WalFlushSource,
): Row {
  const most = (of: 'poolMax' | 'sampledMax') => {
    const values = result.rounds.flatMap((round) =>
      round[of] === undefined ? [] : [round[of]],
    );
    return values.length === 0 ? undefined : Math.max(...values);
  };
  return {
    ...summarizeRounds(scenario, result),
    poolMax: most('poolMax'),
    sampledMax: most('sampledMax'),
    appCpuMsPerRequest: result.cost?.appCpu,
    dbCpuMsPerRequest: result.cost?.dbCpu,
    costRps: result.cost?.rps,
    perRequest:
      result.counted &&
      perRequest(
        result.counted.counts,
        result.counted.requests,
        scenario.countConnections > 1,
        flushSource,
      ),
  };
}

/** A row of the cost table: a scenario's, or the refusal's (counts only). */
interface CostRow {
  readonly scenario: string;
  readonly perRequest: PerRequest | undefined;
  readonly appCpuMsPerRequest?: number;
  readonly dbCpuMsPerRequest?: number;
}

/** One target of the issue tracker, as measured. */
interface Target {
  readonly target: string;
  readonly value: number | undefined;
  readonly met: boolean | undefined;
}

/** Prints the tables and the targets; returns the targets as measured. */
function report(
  rows: readonly Row[],
  refusal: PerRequest | undefined,
  commitCheck: CommitCheck,
  info: Machine,
  poolSize: number,
  flushSource: WalFlushSource,
): Target[] {
  const row = (scenario: Scenario) => rows[SCENARIOS.indexOf(scenario)];
  const ratioCell = (value: number, of: Row) =>
    of.baseline === undefined ? 'base' : `${fixed(value, 2)}x`;
  printTable(rows, [
    ['scenario', -27, (r) => r.scenario],
    ['conns', 5, (r) => String(r.connections)],
    ['req/s', 6, (r) => fixed(r.rps, 0)],
    ['p50 ms', 7, (r) => fixed(r.p50, 1)],
    ['p99 ms', 7, (r) => fixed(r.p99, 1)],
    ['vs base', 7, (r) => ratioCell(r.ratio, r)],
    ['p99 vs base', 11, (r) => ratioCell(r.p99Ratio, r)],
    ['pool max', 8, (r) => (r.poolMax === undefined ? 'n/a' : `${r.poolMax}`)],
    [
      'sampled',
      7,
      (r) => (r.sampledMax === undefined ? 'n/a' : `${r.sampledMax}`),
    ],
    ['non-2xx', 8, (r) => `${r.non2xx}${r.errors ? ` +${r.errors} err` : ''}`],
  ]);
  console.log(
    `(${ROUNDS} rounds x ${SECONDS} s per scenario, interleaved, medians of the rounds; vs base: ratio to ` +
      `the baseline of the same round, gateway to gateway baseline, the others to baseline; pool max: the most ` +
      `of the app's ${poolSize} pooled connections it held at once, counted by its pool; sampled: the most ` +
      `non-idle sessions seen in pg_stat_activity every ${SAMPLE_MS} ms)`,
  );
  console.log('');

  const costRows: CostRow[] = [
    ...rows,
    { scenario: 'refusal (409, derived)', perRequest: refusal },
  ];
  const count = (
    of: (p: PerRequest) => number | undefined,
    digits = 2,
  ): ((r: CostRow) => string) => {
    return (r) => fixed(r.perRequest && of(r.perRequest), digits);
  };
  printTable(costRows, [
    ['per request', -27, (r) => r.scenario],
    ['stmts', 6, count((p) => p.statements)],
    ['commits', 7, count((p) => p.commits)],
    [
      'sync',
      6,
      (r) =>
        r.perRequest
          ? bounded(r.perRequest.syncCommits, r.perRequest.syncBound)
          : 'n/a',
    ],
    [
      'async',
      6,
      (r) =>
        r.perRequest
          ? bounded(r.perRequest.asyncCommits, opposite(r.perRequest.syncBound))
          : 'n/a',
    ],
    ['read-only', 9, count((p) => p.readOnlyCommits)],
    ['rollbacks', 9, count((p) => p.rollbacks)],
    ['app CPU ms', 10, (r) => fixed(r.appCpuMsPerRequest, 2)],
    ['db CPU ms', 9, (r) => fixed(r.dbCpuMsPerRequest, 2)],
    ['WAL bytes', 9, count((p) => p.walBytes, 0)],
  ]);
  console.log(
    `(statements and commits: ${COUNT_REQUESTS} requests per scenario one at a time (contended: ${CONNECTIONS} ` +
      `connections), the cleaner pass of two; sync: WAL flushes by ${flushSource}` +
      `${flushSource === 'all processes' ? ' (the WAL writer too: an upper bound)' : ''}; async: WAL commit ` +
      `records less sync; read-only: commits that wrote nothing; CPU: ${COST_SECONDS} s at ${COST_RATE} req/s ` +
      `for every scenario)`,
  );
  const check = commitCheck.perRequest;
  console.log(
    `commit counting checked on ${commitCheck.each} synchronous inserts, ${commitCheck.each} asynchronous ` +
      `ones and ${commitCheck.each} SELECTs, one at a time: ` +
      `sync ${bounded(check.syncCommits && check.syncCommits * 3 * commitCheck.each, check.syncBound, 0)}, ` +
      `async ${bounded(check.asyncCommits && check.asyncCommits * 3 * commitCheck.each, opposite(check.syncBound), 0)}, ` +
      `read-only ${fixed(check.readOnlyCommits && check.readOnlyCommits * 3 * commitCheck.each, 0)} ` +
      `(${commitCheck.ok ? 'as expected' : 'NOT as expected: the sync/async columns cannot be trusted here'})`,
  );

  const c = row(contended);
  const ok = Object.entries(c.statuses)
    .filter(([status]) => status.startsWith('2'))
    .reduce((sum, [, n]) => sum + n, 0);
  const conflicts = c.statuses['409'] ?? 0;
  console.log('');
  console.log(
    `contended: ${CONNECTIONS} connections on ${CONTENDED_KEYS} keys at a time, ${CONTENDED_REPEATS} requests per key: ` +
      `${c.requests} requests, 2xx ${ok} (${ok - c.replayed} executed, ${c.replayed} replayed), ` +
      `409 ${conflicts}, other ${c.requests - ok - conflicts}`,
  );
  console.log(
    `gateway: the handler waits ${GATEWAY_MS} ms (a gateway's answer), ${GATEWAY_CONNECTIONS} connections`,
  );
  console.log(
    `machine: ${info.cpu}, ${info.cores} cores, ${info.memoryGiB} GiB, load average before ${info.loadAverage}; ` +
      `Node ${info.node}; PostgreSQL ${info.postgres} (${info.server}, fsync ${info.fsync}, ` +
      `synchronous_commit ${info.synchronousCommit}, wal_sync_method ${info.walSyncMethod})`,
  );

  const extra = (
    scenario: Scenario,
    of: 'statements' | 'syncCommits',
  ): number | undefined => {
    const a = row(scenario).perRequest;
    const b = row(scenario.baseline!).perRequest;
    if (
      of === 'syncCommits' &&
      (a?.syncBound !== 'exact' || b?.syncBound !== 'exact')
    ) {
      return undefined;
    }
    const x = a?.[of];
    const y = b?.[of];
    return x === undefined || y === undefined ? undefined : x - y;
  };
  // Counts are averages over the requests of a pass: a stray statement or
  // flush of the server's own moves them by 1/BENCH_COUNT_REQUESTS.
  const near = (value: number | undefined, target: number) =>
    value === undefined ? undefined : Math.abs(value - target) < 0.02;
  const targets: Target[] = [
    {
      target: 'gateway: throughput >= 0.90x gateway baseline',
      value: row(gateway).ratio,
      met: row(gateway).ratio >= 0.9,
    },
    {
      target: 'gateway: p99 <= 1.5x gateway baseline p99',
      value: row(gateway).p99Ratio,
      met: row(gateway).p99Ratio <= 1.5,
    },
    {
      target: 'first execution: throughput >= 0.85x baseline',
      value: row(first).ratio,
      met: row(first).ratio >= 0.85,
    },
    {
      target: 'replay: throughput >= 2.5x baseline',
      value: row(replay).ratio,
      met: row(replay).ratio >= 2.5,
    },
    ...[first, gateway].flatMap((scenario) => {
      const statements = extra(scenario, 'statements');
      const sync = extra(scenario, 'syncCommits');
      return [
        {
          // The claim, the mark of the handler's transaction (sent with its
          // BEGIN, in one query: no round trip of its own) and the
          // completion.
          target: `${scenario.name}: exactly 3 statements more than ${scenario.baseline!.name}`,
          value: statements,
          met: near(statements, 3),
        },
        {
          target: `${scenario.name}: 0 synchronous commits more than ${scenario.baseline!.name}`,
          value: sync,
          met: near(sync, 0),
        },
      ];
    }),
    // The claim, which takes a new key alone, and the read of what holds
    // a key it did not take (test/bench/README.md: the claim that read a
    // held key in the same statement cost every new key more).
    {
      target: 'replay: 2 statements',
      value: row(replay).perRequest?.statements,
      met: near(row(replay).perRequest?.statements, 2),
    },
    {
      target: 'refusal (409): 2 statements',
      value: refusal?.statements,
      met: near(refusal?.statements, 2),
    },
  ];
  console.log('');
  console.log('targets:');
  for (const t of targets) {
    const verdict =
      t.met === undefined ? 'not measured' : t.met ? 'met' : 'MISSED';
    console.log(`  ${t.target}: ${fixed(t.value, 2)} (${verdict})`);
  }
  return targets;
}

/** What the commit classification measured on transactions of known kinds. */
interface CommitCheck {
  /** Transactions of each kind. */
  readonly each: number;
  readonly perRequest: PerRequest;
  readonly ok: boolean;
}

/**
 * Checks the commit classification on transactions whose kind is known,
 * sent one at a time on the app's database before the app starts: `n`
 * synchronous inserts, `n` asynchronous ones (set_config('synchronous_commit',
 * 'off', true) inside the autocommit statement, as the module may do), and
 * `n` read-only SELECTs. Per transaction, that is 1/3 of each kind.
 */
async function checkCommitCounting(
  counters: ServerCounters,
  appUrl: string,
  flushSource: WalFlushSource,
  n: number,
): Promise<CommitCheck> {
  const setup = new pg.Client({ connectionString: appUrl });
  await setup.connect();
  await setup.query(
    'CREATE TABLE bench_commit_check (id serial PRIMARY KEY, kind text NOT NULL)',
  );
  await setup.end();
  const counts = await counters.count(async () => {
    const client = new pg.Client({ connectionString: appUrl });
    await client.connect();
    try {
      for (let i = 0; i < n; i += 1) {
        await client.query(
          "INSERT INTO bench_commit_check (kind) VALUES ('sync')",
        );
        await client.query(
          `WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
           INSERT INTO bench_commit_check (kind) SELECT 'async' FROM async`,
        );
        await client.query('SELECT count(*) FROM bench_commit_check');
      }
    } finally {
      await client.end();
    }
  });
  const drop = new pg.Client({ connectionString: appUrl });
  await drop.connect();
  await drop.query('DROP TABLE bench_commit_check');
  await drop.end();
  const measured = perRequest(counts, 3 * n, false, flushSource);
  const third = (value: number | undefined) =>
    value !== undefined && Math.abs(value - 1 / 3) < 0.02;
  return {
    each: n,
    perRequest: measured,
    ok:
      measured.syncBound === 'exact' &&
      third(measured.syncCommits) &&
      third(measured.asyncCommits) &&
      third(measured.readOnlyCommits),
  };
}

/**
 * Whether counts `a` are cleaner than `b`: what the server does on its own
 * only adds to them (an autovacuum worker's commits; a client backend's WAL
 * flush at the end of a WAL segment), so the one with fewer commits, then
 * fewer WAL flushes.
 */
function cleaner(a: ServerCounts, b: ServerCounts): boolean {
  return a.commits !== b.commits
    ? a.commits < b.commits
    : (a.walFlushes ?? 0) < (b.walFlushes ?? 0);
}

/** Counts `scenario`: twice, keeping the cleaner pass. */
async function countScenario(
  counters: ServerCounters,
  app: SampleProcess,
  scenario: Scenario,
): Promise<Counted> {
  let kept: Counted | undefined;
  for (const pass of [0, 1]) {
    let run: LoadResult | undefined;
    await quiesce(app);
    const counts = await counters.count(async () => {
      run = await runLoad({
        ...load(app, scenario, `count${pass}`),
        connections: scenario.countConnections,
        amount: COUNT_REQUESTS,
      });
    });
    if (!kept || cleaner(counts, kept.counts)) {
      kept = { counts, requests: run!.requests, statuses: run!.statuses };
    }
  }
  return kept!;
}

/**
 * Counts refused requests: one request holds a key in progress (POST
 * /bench/held waits for POST /bench/release) while COUNT_REQUESTS more with
 * the same key and body are sent one at a time, each answered 409. The
 * counts include the held request's own execution.
 */
async function countRefusals(
  counters: ServerCounters,
  app: SampleProcess,
): Promise<Counted> {
  const path = '/bench/held';
  const post = (key: string) =>
    fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: BODY,
    });
  let kept: Counted | undefined;
  for (const pass of [0, 1]) {
    const key = `held-${pass}`;
    let run: LoadResult | undefined;
    await quiesce(app);
    const counts = await counters.count(async () => {
      const held = post(key);
      for (let waited = 0; ; waited += 5) {
        const response = await fetch(`${app.url}${path}`);
        const { waiting } = (await response.json()) as { waiting: number };
        if (waiting > 0) {
          break;
        }
        if (waited > 10_000) {
          throw new Error('The held request did not reach its handler.');
        }
        await sleep(5);
      }
      run = await runLoad({
        url: app.url,
        path,
        body: BODY,
        connections: 1,
        key: () => key,
        amount: COUNT_REQUESTS,
      });
      await fetch(`${app.url}/bench/release`, { method: 'POST' });
      const response = await held;
      await response.arrayBuffer();
      if (response.status !== 201) {
        throw new Error(`The held request answered ${response.status}.`);
      }
    });
    if (run!.statuses['409'] !== COUNT_REQUESTS) {
      throw new Error(
        `Refusals: expected ${COUNT_REQUESTS} 409s, got ${JSON.stringify(run!.statuses)}`,
      );
    }
    if (!kept || cleaner(counts, kept.counts)) {
      kept = { counts, requests: run!.requests, statuses: run!.statuses };
    }
  }
  return kept!;
}

async function main(): Promise<void> {
  const server = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({
        durable: true,
        settings: {
          shared_preload_libraries: 'pg_stat_statements',
          'pg_stat_statements.track_planning': 'on',
        },
      });
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  const database = `idem_bench_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  let counters: ServerCounters | undefined;
  let sampler: ActivitySampler | undefined;
  let app: SampleProcess | undefined;
  try {
    await onServer(serverUrl, `CREATE DATABASE "${database}"`);
    const appUrl = new URL(serverUrl);
    appUrl.pathname = `/${database}`;
    counters = await ServerCounters.open(serverUrl, database);
    sampler = await ActivitySampler.open(serverUrl, database, SAMPLE_MS);
    if (!counters.hasStatements) {
      console.warn(
        'pg_stat_statements is not preloaded on this server: statements per request are not counted ' +
          '(start it with -c shared_preload_libraries=pg_stat_statements, or run without DATABASE_URL).',
      );
    }
    if (!counters.hasWalInspect) {
      console.warn(
        'pg_walinspect is not available (PostgreSQL 15+, superuser): asynchronous and read-only commits are not told apart.',
      );
    }
    if (process.env.DATABASE_URL) {
      console.warn(
        "The WAL figures (synchronous, asynchronous commits) are the whole server's: other databases' work counts too.",
      );
    }
    const info = await machine(counters);
    const commitCheck = await checkCommitCounting(
      counters,
      appUrl.href,
      counters.walFlushSource,
      COUNT_REQUESTS,
    );
    const [{ pid }] = await counters.query<{ pid: number }>(
      'SELECT pg_backend_pid() AS pid',
    );

    app = await startSample(
      {
        DATABASE_URL: appUrl.href,
        // The in-process gateway stand-in: no gateway in the figures but
        // the gateway routes' wait.
        GATEWAY_URL: '',
        BENCH_GATEWAY_MS: String(GATEWAY_MS),
      },
      {
        entry: pathToFileURL(`${ROOT}dist-bench/test/bench/bench-app/main.js`)
          .href,
        ready: /Bench app listening on (http:\/\/\S+)/,
      },
    );
    const bench: Bench = {
      app,
      appPid: app.process.pid,
      // Only a server of its own says what the app's requests cost it.
      postmaster: server ? postmasterOf(pid) : undefined,
      sampler,
    };
    const poolSize = (await readPool(app)).size;
    console.log(
      `bench app at ${app.url}, database ${database}; ${SCENARIOS.length} scenarios x ${ROUNDS} rounds x ${SECONDS} s`,
    );

    // The keys that replay finds completed.
    const created = await runLoad({
      ...load(app, replay, 'setup'),
      amount: REPLAY_KEYS,
    });
    if (created.statuses['201'] !== REPLAY_KEYS || created.replayed !== 0) {
      throw new Error(
        `creating the replay keys: ${JSON.stringify(created.statuses)}, ${created.replayed} replayed`,
      );
    }

    // Warm-up (JIT, pools, caches), not measured.
    for (const scenario of SCENARIOS) {
      await runLoad({
        ...load(app, scenario, 'warmup'),
        seconds: WARMUP_SECONDS,
      });
    }

    const results: Map<Scenario, ScenarioResult> = await interleave(
      SCENARIOS,
      ROUNDS,
      (scenario, round) =>
        timed(bench, scenario, `${round}`, SECONDS, { watch: true }),
    );

    // CPU per request: the same fixed rate for every scenario, so that none
    // gets cheaper per request only by being faster (fuller batches).
    for (const scenario of SCENARIOS) {
      results.get(scenario)!.cost = await timed(
        bench,
        scenario,
        'cost',
        COST_SECONDS,
        { rate: COST_RATE },
      );
    }

    // Statements and commits, alone on the database.
    for (const scenario of SCENARIOS) {
      results.get(scenario)!.counted = await countScenario(
        counters,
        app,
        scenario,
      );
    }
    const refusals = await countRefusals(counters, app);

    const flushSource = counters.walFlushSource;
    const rows = SCENARIOS.map((s) =>
      summarize(s, results.get(s)!, flushSource),
    );
    const firstCost = rows[SCENARIOS.indexOf(first)].perRequest;
    const refusal =
      firstCost &&
      perRequest(
        refusals.counts,
        refusals.requests,
        false,
        flushSource,
        firstCost,
      );
    console.log('');
    const targets = report(
      rows,
      refusal,
      commitCheck,
      info,
      poolSize,
      flushSource,
    );
    const json = {
      date: new Date().toISOString(),
      machine: info,
      settings: {
        ...LOAD,
        countRequests: COUNT_REQUESTS,
        costRate: COST_RATE,
        costSeconds: COST_SECONDS,
        contendedKeys: CONTENDED_KEYS,
        contendedRepeats: CONTENDED_REPEATS,
        sampleMs: SAMPLE_MS,
        poolSize,
        walFlushes: flushSource,
        gateway: 'in-process stand-in',
      },
      scenarios: SCENARIOS.map((scenario, i) => {
        const result = results.get(scenario)!;
        return {
          ...rows[i],
          rounds: result.rounds,
          ratios: result.ratios,
          p99Ratios: result.p99Ratios,
          cost: result.cost,
          counted: result.counted,
        };
      }),
      refusal: { perRequest: refusal, counted: refusals },
      commitCheck,
      targets,
    };
    await mkdir(dirname(OUTPUT), { recursive: true });
    await writeFile(OUTPUT, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`\nresults written to ${OUTPUT}`);
  } finally {
    await app?.stop();
    await sampler?.close();
    await counters?.close();
    if (server) {
      await server.stop();
    } else {
      await onServer(
        serverUrl,
        `DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`,
      );
    }
  }
}

await main();
