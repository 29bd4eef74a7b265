/**
 * Throughput and cost of the idempotency module: the sample app as a real
 * process on PostgreSQL (fsync on), driven over loopback by autocannon.
 *
 *   baseline     POST /bench/baseline: the payment in a plain transaction, no idempotency
 *   first        POST /bench/payments: @Idempotent(), every request a new key
 *   replay       POST /bench/payments: every request a key that already completed
 *   contended    POST /bench/payments: all connections on a few keys at a time
 *   with step    POST /payments: the sample's real route, whose charge is a recovery point
 *
 * The scenarios run interleaved, in rounds, with the same connections (medians
 * reported, the ratio to the baseline taken within each round). Then each
 * runs at one fixed rate, for the CPU time a request costs the app and the
 * server; and a fixed number of requests each, for the statements and
 * commits the server counts (pg_stat_statements, pg_stat_database).
 * One table goes to the console, everything to a JSON file.
 *
 *   npm run bench                              (embedded PostgreSQL 18, fsync on)
 *   DATABASE_URL=postgres://... npm run bench  (statements need pg_stat_statements preloaded there)
 *
 * Settings (defaults): BENCH_SECONDS=5 BENCH_ROUNDS=5 BENCH_CONNECTIONS=10
 * BENCH_WARMUP_SECONDS=3 BENCH_COST_RATE=100 BENCH_COST_SECONDS=5
 * BENCH_COUNT_REQUESTS=500 BENCH_REPLAY_KEYS=2000 BENCH_CONTENDED_KEYS=5
 * BENCH_CONTENDED_REPEATS=10 BENCH_OUTPUT=dist-bench/bench-results.json
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import {
  startSample,
  type SampleProcess,
} from '../sample-app/sample-process.js';
import { postmasterOf, processCpuMs, serverCpuMs } from './cpu-time.js';
import { median, runLoad, type LoadResult } from './load.js';
import { ServerCounters, type ServerCounts } from './server-counters.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function setting(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(value) || value <= 0) {
    throw new Error(`${name} must be a positive number`);
  }
  return value;
}

const SECONDS = setting('BENCH_SECONDS', 5);
const ROUNDS = setting('BENCH_ROUNDS', 5);
const CONNECTIONS = setting('BENCH_CONNECTIONS', 10);
const WARMUP_SECONDS = setting('BENCH_WARMUP_SECONDS', 3);
const COUNT_REQUESTS = setting('BENCH_COUNT_REQUESTS', 500);
const REPLAY_KEYS = setting('BENCH_REPLAY_KEYS', 2000);
const CONTENDED_KEYS = setting('BENCH_CONTENDED_KEYS', 5);
const CONTENDED_REPEATS = setting('BENCH_CONTENDED_REPEATS', 10);
const COST_RATE = setting('BENCH_COST_RATE', 100);
const COST_SECONDS = setting('BENCH_COST_SECONDS', 5);
const OUTPUT =
  process.env.BENCH_OUTPUT ?? `${ROOT}dist-bench/bench-results.json`;

const BODY = JSON.stringify({
  amount: 1250,
  currency: 'EUR',
  merchantId: 'm_42',
});

/** A way of sending requests, measured in every round. */
interface Scenario {
  readonly name: string;
  readonly path: string;
  /** Keys for one run; `run` tells runs apart so that keys never repeat by accident. */
  keys(run: string): () => string;
}

const baseline: Scenario = {
  name: 'baseline',
  path: '/bench/baseline',
  keys: (run) => {
    let n = 0;
    return () => `b-${run}-${n++}`;
  },
};
const first: Scenario = {
  name: 'first execution',
  path: '/bench/payments',
  keys: (run) => {
    let n = 0;
    return () => `f-${run}-${n++}`;
  },
};
const replay: Scenario = {
  name: 'replay',
  path: '/bench/payments',
  keys: () => {
    let n = 0;
    return () => `r-${n++ % REPLAY_KEYS}`;
  },
};
const contended: Scenario = {
  name: 'contended',
  path: '/bench/payments',
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
  keys: (run) => {
    let n = 0;
    return () => `s-${run}-${n++}`;
  },
};
const SCENARIOS = [baseline, first, replay, contended, withStep];

/** One timed run of a scenario, with the CPU time it cost per request. */
interface RoundResult extends LoadResult {
  /** Milliseconds of CPU of the app process per request. */
  readonly appCpu: number | undefined;
  /** Milliseconds of CPU of the whole PostgreSQL server per request (embedded server only). */
  readonly dbCpu: number | undefined;
}

/** What one scenario measured over all rounds. */
interface ScenarioResult {
  readonly rounds: RoundResult[];
  /** Its throughput over the baseline's, round by round. */
  readonly ratios: number[];
  /** A run at the same fixed rate for every scenario: what a request costs. */
  cost?: RoundResult;
  counts?: ServerCounts;
  countRun?: LoadResult;
}

function load(app: SampleProcess, scenario: Scenario, run: string) {
  return {
    url: app.url,
    path: scenario.path,
    body: BODY,
    connections: CONNECTIONS,
    key: scenario.keys(run),
  };
}

/** Where the CPU time of a run is read from. */
interface CpuSources {
  readonly app: number | undefined;
  readonly postmaster: number | undefined;
}

/** Runs `scenario` for `seconds` and reads the CPU time the app and the server spent. */
async function timed(
  app: SampleProcess,
  cpu: CpuSources,
  scenario: Scenario,
  run: string,
  seconds: number,
  rate?: number,
): Promise<RoundResult> {
  const app0 = processCpuMs(cpu.app);
  const db0 = serverCpuMs(cpu.postmaster);
  const result = await runLoad({ ...load(app, scenario, run), seconds, rate });
  const app1 = processCpuMs(cpu.app);
  const db1 = serverCpuMs(cpu.postmaster);
  const perRequest = (before?: number, after?: number) =>
    before === undefined || after === undefined || result.requests === 0
      ? undefined
      : (after - before) / result.requests;
  return {
    ...result,
    appCpu: perRequest(app0, app1),
    dbCpu: perRequest(db0, db1),
  };
}

/** The machine and server the figures come from. */
type Machine = Awaited<ReturnType<typeof machine>>;

async function machine(counters: ServerCounters) {
  const [server] = await counters.query<Record<string, string>>(
    `SELECT current_setting('server_version') AS version,
            current_setting('fsync') AS fsync,
            current_setting('synchronous_commit') AS synchronous_commit,
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
    sharedBuffers: server.shared_buffers,
    server: process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded',
  };
}

const fixed = (value: number | undefined, digits: number) =>
  value === undefined || Number.isNaN(value) ? 'n/a' : value.toFixed(digits);

/** The figures of one scenario, as printed and written to the JSON file. */
interface Row {
  readonly scenario: string;
  readonly path: string;
  /** Medians over the rounds. */
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly ratio: number;
  readonly ratioRange: readonly [number, number];
  /** CPU milliseconds per request at the same fixed rate for every scenario. */
  readonly appCpuMsPerRequest: number | undefined;
  readonly dbCpuMsPerRequest: number | undefined;
  /** The rate that run achieved. */
  readonly costRps: number | undefined;
  /** From the counting pass. */
  readonly statementsPerRequest: number | undefined;
  readonly commitsPerRequest: number | undefined;
  readonly sqlExecMsPerRequest: number | undefined;
  readonly sqlPlanMsPerRequest: number | undefined;
  readonly walBytesPerRequest: number | undefined;
  /** Totals over the rounds. */
  readonly requests: number;
  readonly non2xx: number;
  /** Connection errors and timeouts. */
  readonly errors: number;
  readonly replayed: number;
  readonly statuses: Record<string, number>;
}

function summarize(scenario: Scenario, result: ScenarioResult): Row {
  const perRequest = (
    of: 'statements' | 'commits' | 'execMs' | 'planMs' | 'walBytes',
  ) => {
    const counted = result.counts?.[of];
    const requests = result.countRun?.requests ?? 0;
    return counted === undefined || requests === 0
      ? undefined
      : counted / requests;
  };
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
    rps: median(result.rounds.map((r) => r.rps)),
    p50: median(result.rounds.map((r) => r.p50)),
    p99: median(result.rounds.map((r) => r.p99)),
    ratio: median(result.ratios),
    ratioRange: [Math.min(...result.ratios), Math.max(...result.ratios)],
    appCpuMsPerRequest: result.cost?.appCpu,
    dbCpuMsPerRequest: result.cost?.dbCpu,
    costRps: result.cost?.rps,
    statementsPerRequest: perRequest('statements'),
    commitsPerRequest: perRequest('commits'),
    sqlExecMsPerRequest: perRequest('execMs'),
    sqlPlanMsPerRequest: perRequest('planMs'),
    walBytesPerRequest: perRequest('walBytes'),
    requests: total('requests'),
    non2xx: total('non2xx'),
    errors: total('errors'),
    replayed: total('replayed'),
    statuses,
  };
}

/** A column: title, width (negative: left-aligned) and cell. */
type Column = [string, number, (row: Row) => string];

function printTable(rows: readonly Row[], columns: readonly Column[]): void {
  const line = (cells: string[]) =>
    cells
      .map((cell, i) =>
        columns[i][1] < 0
          ? cell.padEnd(-columns[i][1])
          : cell.padStart(columns[i][1]),
      )
      .join(' ');
  const header = line(columns.map(([title]) => title));
  console.log(header);
  console.log('-'.repeat(header.length));
  for (const row of rows) {
    console.log(line(columns.map(([, , cell]) => cell(row))));
  }
}

/** Prints the tables and the targets; returns the targets as measured. */
function report(rows: readonly Row[], info: Machine) {
  printTable(rows, [
    ['scenario', -28, (row) => row.scenario],
    ['req/s', 7, (row) => fixed(row.rps, 0)],
    ['p50 ms', 7, (row) => fixed(row.p50, 1)],
    ['p99 ms', 7, (row) => fixed(row.p99, 1)],
    ['vs base', 8, (row) => `${fixed(row.ratio, 2)}x`],
    ['stmts/req', 10, (row) => fixed(row.statementsPerRequest, 2)],
    ['commits/req', 12, (row) => fixed(row.commitsPerRequest, 2)],
    [
      'non-2xx',
      8,
      (row) => `${row.non2xx}${row.errors ? ` +${row.errors} err` : ''}`,
    ],
  ]);
  console.log('');
  console.log(
    `where the time goes, per request (CPU: ${COST_SECONDS} s at the same fixed rate, req/s, for every scenario; ` +
      'SQL: pg_stat_statements over the counted requests):',
  );
  printTable(rows, [
    ['scenario', -28, (row) => row.scenario],
    ['req/s', 6, (row) => fixed(row.costRps, 0)],
    ['app CPU ms', 11, (row) => fixed(row.appCpuMsPerRequest, 2)],
    ['db CPU ms', 10, (row) => fixed(row.dbCpuMsPerRequest, 2)],
    ['SQL exec ms', 12, (row) => fixed(row.sqlExecMsPerRequest, 3)],
    ['SQL plan ms', 12, (row) => fixed(row.sqlPlanMsPerRequest, 3)],
    ['WAL bytes', 10, (row) => fixed(row.walBytesPerRequest, 0)],
  ]);

  const row = (scenario: Scenario) => rows[SCENARIOS.indexOf(scenario)];
  const c = row(contended);
  const ok = Object.entries(c.statuses)
    .filter(([status]) => status.startsWith('2'))
    .reduce((sum, [, count]) => sum + count, 0);
  const conflicts = c.statuses['409'] ?? 0;
  console.log('');
  console.log(
    `contended: ${CONNECTIONS} connections on ${CONTENDED_KEYS} keys at a time, ${CONTENDED_REPEATS} requests per key: ` +
      `${c.requests} requests, 2xx ${ok} (${ok - c.replayed} executed, ${c.replayed} replayed), ` +
      `409 ${conflicts}, other ${c.requests - ok - conflicts}`,
  );
  console.log(
    `${ROUNDS} rounds x ${SECONDS} s per scenario, interleaved, medians of the rounds (vs base: ratio to the baseline ` +
      `of the same round); ${CONNECTIONS} connections; statements and commits counted by the server over ` +
      `${COUNT_REQUESTS} requests per scenario (the pass with fewer commits of two)`,
  );
  console.log(
    `machine: ${info.cpu}, ${info.cores} cores, ${info.memoryGiB} GiB, load average before ${info.loadAverage}; ` +
      `Node ${info.node}; PostgreSQL ${info.postgres} (${info.server}, fsync ${info.fsync}, ` +
      `synchronous_commit ${info.synchronousCommit})`,
  );

  const extra = (of: 'statementsPerRequest' | 'commitsPerRequest') => {
    const a = row(first)[of];
    const b = row(baseline)[of];
    return a === undefined || b === undefined ? undefined : a - b;
  };
  const extraStatements = extra('statementsPerRequest');
  const extraCommits = extra('commitsPerRequest');
  const targets = [
    {
      target: 'first execution >= 0.90x baseline throughput',
      value: row(first).ratio,
      met: row(first).ratio >= 0.9,
    },
    {
      target: 'replay >= 1.5x baseline throughput',
      value: row(replay).ratio,
      met: row(replay).ratio >= 1.5,
    },
    {
      target: 'first execution: at most 2 extra statements per request',
      value: extraStatements,
      met: extraStatements === undefined ? undefined : extraStatements <= 2,
    },
    {
      target: 'first execution: 0 extra commits per request',
      value: extraCommits,
      met: extraCommits === undefined ? undefined : extraCommits <= 0,
    },
  ];
  console.log('');
  for (const t of targets) {
    const verdict =
      t.met === undefined ? 'not measured' : t.met ? 'met' : 'MISSED';
    console.log(`  ${t.target}: ${fixed(t.value, 2)} (${verdict})`);
  }
  return targets;
}

/** Creates or drops a database on the server. */
async function onServer(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
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
  let app: SampleProcess | undefined;
  try {
    await onServer(serverUrl, `CREATE DATABASE "${database}"`);
    const appUrl = new URL(serverUrl);
    appUrl.pathname = `/${database}`;
    counters = await ServerCounters.open(serverUrl, database);
    if (!counters.hasStatements) {
      console.warn(
        'pg_stat_statements is not preloaded on this server: statements per request are not counted ' +
          '(start it with -c shared_preload_libraries=pg_stat_statements, or run without DATABASE_URL).',
      );
    }
    const info = await machine(counters);
    const [{ pid }] = await counters.query<{ pid: number }>(
      'SELECT pg_backend_pid() AS pid',
    );

    app = await startSample(
      {
        DATABASE_URL: appUrl.href,
        // The in-process gateway stand-in: no gateway in the figures.
        GATEWAY_URL: '',
      },
      {
        entry: pathToFileURL(`${ROOT}dist-bench/test/bench/bench-app/main.js`)
          .href,
        ready: /Bench app listening on (http:\/\/\S+)/,
      },
    );
    const cpu: CpuSources = {
      app: app.process.pid,
      // Only a server of its own says what the app's requests cost it.
      postmaster: server ? postmasterOf(pid) : undefined,
    };
    console.log(
      `sample app at ${app.url}, database ${database}; ${SCENARIOS.length} scenarios x ${ROUNDS} rounds x ${SECONDS} s, ${CONNECTIONS} connections`,
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

    const results = new Map<Scenario, ScenarioResult>(
      SCENARIOS.map((s) => [s, { rounds: [], ratios: [] }]),
    );
    for (let round = 0; round < ROUNDS; round += 1) {
      // Each round starts with another scenario: none always runs first.
      const order = SCENARIOS.map(
        (_, i) => SCENARIOS[(i + round) % SCENARIOS.length],
      );
      const measured = new Map<Scenario, RoundResult>();
      for (const scenario of order) {
        const result = await timed(app, cpu, scenario, `${round}`, SECONDS);
        measured.set(scenario, result);
        results.get(scenario)!.rounds.push(result);
      }
      const baseRps = measured.get(baseline)!.rps;
      for (const [scenario, result] of measured) {
        results.get(scenario)!.ratios.push(result.rps / baseRps);
      }
      console.log(
        `round ${round + 1}/${ROUNDS}: ` +
          SCENARIOS.map(
            (s) => `${s.name} ${measured.get(s)!.rps.toFixed(0)}/s`,
          ).join(', '),
      );
    }

    // CPU per request: the same fixed rate for every scenario, so that none
    // gets cheaper per request only by being faster (fuller batches).
    for (const scenario of SCENARIOS) {
      results.get(scenario)!.cost = await timed(
        app,
        cpu,
        scenario,
        'cost',
        COST_SECONDS,
        COST_RATE,
      );
    }

    // Statements and commits: a fixed number of requests per scenario, alone
    // on the database. Twice, keeping the pass with fewer commits: an
    // autovacuum worker visiting the database commits transactions too.
    for (const scenario of SCENARIOS) {
      const result = results.get(scenario)!;
      for (const pass of [0, 1]) {
        let run: LoadResult | undefined;
        const counts = await counters.count(async () => {
          run = await runLoad({
            ...load(app!, scenario, `count${pass}`),
            amount: COUNT_REQUESTS,
          });
        });
        if (!result.counts || counts.commits < result.counts.commits) {
          result.counts = counts;
          result.countRun = run;
        }
      }
    }

    const rows = SCENARIOS.map((s) => summarize(s, results.get(s)!));
    const targets = report(rows, info);
    const json = {
      date: new Date().toISOString(),
      machine: info,
      settings: {
        seconds: SECONDS,
        rounds: ROUNDS,
        connections: CONNECTIONS,
        warmupSeconds: WARMUP_SECONDS,
        countRequests: COUNT_REQUESTS,
        costRate: COST_RATE,
        costSeconds: COST_SECONDS,
        replayKeys: REPLAY_KEYS,
        contendedKeys: CONTENDED_KEYS,
        contendedRepeats: CONTENDED_REPEATS,
        pool: 'TypeORM default (10 connections)',
        gateway: 'in-process stand-in',
      },
      scenarios: SCENARIOS.map((scenario, i) => {
        const result = results.get(scenario)!;
        return {
          ...rows[i],
          rounds: result.rounds,
          ratios: result.ratios,
          cost: result.cost,
          counted: result.counts && {
            requests: result.countRun?.requests,
            statuses: result.countRun?.statuses,
            ...result.counts,
          },
        };
      }),
      targets,
    };
    await mkdir(dirname(OUTPUT), { recursive: true });
    await writeFile(OUTPUT, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`\nresults written to ${OUTPUT}`);
  } finally {
    await app?.stop();
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
