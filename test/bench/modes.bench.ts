/**
 * One handler, every way of making it idempotent, side by side: what the
 * module costs on PostgreSQL against the bare SQL of its own protocol and
 * against the same protocol written lean by hand, on Redis against
 * @node-idempotency/nestjs, and on each data library's adapter against
 * that library alone.
 *
 * Every mode runs the same minimal handler (bench-app/modes.handler.ts): it
 * awaits the gateway stand-in, then saves one payment and two ledger rows
 * (through TypeORM repositories, or in the data libraries' modes with that
 * library), and reads nothing back. Each mode is an app
 * of its own (bench-app/modes-main.ts), all of them on one PostgreSQL
 * server (an embedded one with fsync on, or DATABASE_URL), each on a
 * database of its own (copies of one that the migrations made: every
 * mode's tables hold only the rows of its own requests, so that no mode
 * writes into an index that other modes have grown), and each request
 * carries a new UUID as its key:
 *
 *   baseline   no idempotency; the writes in `dataSource.transaction(...)`
 *   postgres   @Idempotent(), the module on its PostgreSQL store; the writes
 *              through the injected repositories, in the module's
 *              transaction, which the record commits in
 *   encrypted  the postgres mode with the `encryption` option on (a key ring
 *              of two keys): each stored response sealed with AES-256-GCM;
 *              against postgres, round by round: what encryption costs
 *   floor      the PostgreSQL store's statements and nothing else, sent by
 *              a plain route through the `pg` driver as named prepared
 *              statements, on the app's pool: the claim,
 *              an `INSERT … ON CONFLICT DO NOTHING` reading what holds the
 *              key, in autocommit; then
 *              `dataSource.transaction(...)`: START TRANSACTION, the
 *              handler's inserts, the store's completion (an `UPDATE`
 *              fenced by the owner token, then the deletion of the key's
 *              steps if it has any) on the transaction's connection,
 *              COMMIT
 *              (bench-app/floor.controller.ts)
 *   lean       the lean floor: the same protocol as a careful engineer
 *              would write it by hand, on a table of its own
 *              (bench_lean_keys, created by the bench), no interceptor, no
 *              module code, no SQL functions; through the `pg` driver as
 *              named prepared statements on the app's pool: the leased
 *              claim, `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE`
 *              (the record or the lease expired), in autocommit (a key it
 *              did not take is read: 422, 409 or the stored response); then
 *              `dataSource.transaction(...)`: START TRANSACTION, the
 *              handler's inserts, the completion `UPDATE ... WHERE key = $1
 *              AND owner = $2` on the transaction's connection, COMMIT
 *              (bench-app/lean.controller.ts, bench-app/lean-keys.ts).
 *              Where the floor's database work is the module's own, the
 *              lean floor's is not: the module against it is what the
 *              module costs in the app and in the database together
 *   redis      @Idempotent(), the module on the Redis store
 *              (BENCH_REDIS_URL); the writes in `dataSource.transaction(...)`
 *   unfenced   the module on the Redis store with one change, for the bench
 *              only: its completion is a plain, unconditional `SET`, as the
 *              other library's (bench-app/unfenced-redis.store.ts), instead
 *              of the completion fenced by the attempt's owner (a script on
 *              Redis 7): what the fence costs
 *   theirs     @node-idempotency/nestjs (BENCH_NODE_IDEMPOTENCY, a version;
 *              installed at run time in a temporary directory, as
 *              `npm run bench:stores` does) on the same Redis; the writes in
 *              `dataSource.transaction(...)`
 *   memory     @Idempotent(), the module on the in-memory store; the writes
 *              in `dataSource.transaction(...)`. Light setting only: what
 *              the module's own work costs the app's CPU, next to the
 *              baseline's undecorated route
 *
 * and, for each data library L with an adapter of the PostgreSQL store (pg,
 * drizzle, kysely, prisma; bench-app/<L>.library.ts), the same handler
 * written with L, in an app without TypeORM, on a `pg.Pool` of its own:
 *
 *   L-baseline  no idempotency; the writes in L's own transaction, begun
 *               after the charge (`BEGIN`/`COMMIT` on a client of the pool,
 *               `db.transaction(...)`, `db.transaction().execute(...)`,
 *               `prisma.$transaction(...)`)
 *   L           @Idempotent(), the module on L's adapter; the writes
 *               through `IdempotencyContext<…>.transaction`
 *
 * in two settings:
 *
 *   light      POST /modes/light, no wait, BENCH_CONNECTIONS connections
 *   gateway    POST /modes/gateway, the gateway answers after
 *              BENCH_GATEWAY_MS, BENCH_GATEWAY_CONNECTIONS connections
 *
 * Before measuring, each idempotent mode is checked to replay (a request,
 * the same again: 201, Idempotent-Replayed: true, the same body, one
 * payment written; the key with another body: 422).
 *
 * Before the rounds, each run (a mode in a setting) is warmed alone for
 * BENCH_WARMUP_SECONDS, not measured. The runs are then interleaved in
 * rounds, each round starting with another one; the floor, the lean
 * floor, the module on PostgreSQL and the module encrypted run back to
 * back (in that order, so that each is next to what it is compared with
 * but the module and the floor), and so do the Redis modes of the module
 * and the other library, and each L-baseline and L, in their order one
 * round and reversed the next. Per run: req/s, p50 and p99 latency
 * (medians of the rounds); ratios taken within each round (medians, with
 * the rounds' range): to the baseline of the setting, and of the module
 * on PostgreSQL to the floor and to the lean floor, of the floor to the
 * lean floor, of the encrypted mode to the module on PostgreSQL, of the
 * module's Redis modes to the other library, and of each L to L-baseline;
 * each with the CPU per request of both sides (app, PostgreSQL) and the
 * difference.
 *
 * CPU per request is measured during the load runs themselves (user +
 * system time from /proc over the run, divided by the requests it served;
 * medians of the rounds): of the mode's app process, of the whole
 * PostgreSQL server (postmaster and children; only the bench's own embedded
 * server), of that server's sessions on the mode's own database (`sess`:
 * the statements' work, without the server's shared processes and
 * without autovacuum, which may vacuum one mode's table during another's
 * run) and of the Redis server (the pid `INFO server` names, where it
 * runs on this machine). On 2 cores every mode is bound by CPU, so this is
 * what explains its throughput; a faster mode may batch a little more per
 * round trip, which is part of what it is. `app Δ base` is the app's CPU
 * per request less the baseline's, within each round (median): the
 * library's own work. Each comparison's line gives, for each CPU, both
 * medians, then the median of the rounds' differences and of the rounds'
 * ratios (a mode's CPU over the other's within a round): the ratio is the
 * figure to hold against a target such as "within 15 %", as the two runs
 * of a round share the machine's speed of the moment.
 *
 * `pool ms` is how long a request keeps a connection of the app's pool
 * (its size, ten, in every mode) from the others: the connection-
 * milliseconds held over the run (the pool's checkouts to its releases,
 * pool-gauge.ts), a request's share. The pool serves at most its size ×
 * 1000 ÷ `pool ms` requests a second: in the gateway setting, whose
 * handlers wait rather than compute, that bound and not the CPU is what
 * caps a mode near it.
 *
 *   npm run bench:modes           (npm run bench runs it first)
 *   BENCH_MODES=baseline,redis,theirs BENCH_SECONDS=2 BENCH_ROUNDS=1 npm run bench:modes
 *   BENCH_MODES=baseline,postgres,adapters npm run bench:modes
 *
 * Settings (defaults), about 6 minutes on 2 cores:
 * BENCH_MODES=baseline,postgres,encrypted,floor,lean,redis,unfenced,theirs,memory (the
 * baseline is always run; the data libraries' modes only when named: one
 * by one, or all eight as `adapters`, which doubles the bench's time)
 * BENCH_MODE_SETTINGS=light,gateway BENCH_SECONDS=4 BENCH_RATE (unset: as
 * fast as each run goes; a rate, in requests a second, compares the modes'
 * CPU a request at the same load)
 * BENCH_ROUNDS=5 BENCH_CONNECTIONS=16 BENCH_GATEWAY_CONNECTIONS=50
 * BENCH_GATEWAY_MS=50 BENCH_WARMUP_SECONDS=2
 * BENCH_REDIS_URL=redis://127.0.0.1:6379 BENCH_NODE_IDEMPOTENCY=1.0.4 (0:
 * not compared) BENCH_MODES_OUTPUT=dist-bench/modes-bench-results.json
 * DATABASE_POOL_SIZE=10 (each app's pool; its idle connections are kept
 * open: DATABASE_POOL_IDLE_MS=0; pg's default closes them after 10,000 ms)
 */
import { randomUUID } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import type { SampleProcess } from '../utils/sample-process.js';
import { quiesce, readPool } from './app-state.js';
import {
  cpuNow,
  postmasterOf,
  withCpu,
  type CpuPerRequest,
  type Measured,
} from './cpu-time.js';
import { onServer } from './database.js';
import {
  databaseUrl,
  makeModeDatabases,
  modeDatabaseName,
  startModeApp,
} from './mode-apps.js';
import {
  median,
  medianInterval,
  runLoad,
  type MedianInterval,
} from './load.js';
import { cleanRedis, localRedisPid, serverName } from './redis-server.js';
import { checkReplay, printCheck, type ReplayCheck } from './replay-check.js';
import {
  interleave,
  load,
  summarizeRounds,
  type LoadRow,
  type LoadScenario,
  type Rounds,
} from './scenario.js';
import { loadSettings, setting } from './settings.js';
import { fixed, printTable } from './table.js';
import { installTheirs, type Theirs } from './theirs.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const SETTINGS = loadSettings({
  seconds: 4,
  warmupSeconds: 2,
  connections: 16,
});
/**
 * Requests a second over all of a run's connections in the rounds
 * (`BENCH_RATE`; a run is then that many times `BENCH_SECONDS` requests,
 * each answered); unset, each run goes as fast as it can. At one rate that
 * every mode keeps up with, the modes' CPU a request compares them at the
 * same load: at full speed a faster mode also puts more requests at a time
 * on PostgreSQL, which changes what a request costs it (fewer idle
 * wake-ups, more contention) whatever the mode does.
 */
const RATE =
  process.env.BENCH_RATE === undefined ? undefined : setting('BENCH_RATE', 1);
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const THEIRS_VERSION = process.env.BENCH_NODE_IDEMPOTENCY ?? '1.0.4';
const OUTPUT =
  process.env.BENCH_MODES_OUTPUT ??
  `${ROOT}dist-bench/modes-bench-results.json`;

/** The data libraries with an adapter of the PostgreSQL store, by id and name. */
const LIBRARIES = [
  ['pg', 'node-postgres'],
  ['drizzle', 'Drizzle'],
  ['kysely', 'Kysely'],
  ['prisma', 'Prisma'],
] as const;
type Library = (typeof LIBRARIES)[number][0];

type ModeId =
  | 'baseline'
  | 'postgres'
  | 'encrypted'
  | 'floor'
  | 'lean'
  | 'redis'
  | 'unfenced'
  | 'theirs'
  | 'memory'
  | Library
  | `${Library}-baseline`;
type Setting = 'light' | 'gateway';

/** A way of making the handler idempotent (or not): one app. */
interface Mode {
  readonly id: ModeId;
  readonly name: string;
  /** The data library its handler writes with, if not TypeORM. */
  readonly library?: string;
  /** The modes its throughput is compared with, round by round. */
  readonly against?: readonly ModeId[];
  /** Whether it runs in the gateway setting too. */
  readonly gateway: boolean;
  /** Whether it answers a duplicate with the stored response. */
  readonly idempotent: boolean;
  /** Whether it needs Redis. */
  readonly redis: boolean;
}

const MODES: readonly Mode[] = [
  {
    id: 'baseline',
    name: 'baseline (no idempotency)',
    gateway: true,
    idempotent: false,
    redis: false,
  },
  {
    id: 'postgres',
    name: 'module, PostgreSQL store',
    against: ['floor', 'lean'],
    gateway: true,
    idempotent: true,
    redis: false,
  },
  {
    id: 'encrypted',
    name: 'module, PostgreSQL, encrypted',
    against: ['postgres'],
    gateway: true,
    idempotent: true,
    redis: false,
  },
  {
    id: 'floor',
    name: 'bare SQL floor (PostgreSQL)',
    against: ['lean'],
    gateway: true,
    idempotent: true,
    redis: false,
  },
  {
    id: 'lean',
    name: 'lean floor (own table, by hand)',
    gateway: true,
    idempotent: true,
    redis: false,
  },
  {
    id: 'redis',
    name: 'module, Redis store',
    against: ['theirs'],
    gateway: true,
    idempotent: true,
    redis: true,
  },
  {
    id: 'unfenced',
    name: 'module, Redis, SET unfenced',
    against: ['theirs'],
    gateway: true,
    idempotent: true,
    redis: true,
  },
  {
    id: 'theirs',
    name: '@node-idempotency/nestjs, Redis',
    gateway: true,
    idempotent: true,
    redis: true,
  },
  {
    id: 'memory',
    name: 'module, memory store',
    gateway: false,
    idempotent: true,
    redis: false,
  },
  ...LIBRARIES.flatMap(([id, library]): Mode[] => [
    {
      id: `${id}-baseline`,
      name: `${library} alone`,
      library,
      gateway: true,
      idempotent: false,
      redis: false,
    },
    {
      id,
      name: `module on ${library}`,
      library,
      against: [`${id}-baseline`],
      gateway: true,
      idempotent: true,
      redis: false,
    },
  ]),
];

/**
 * The modes compared with each other, whose runs go back to back, in this
 * order (reversed every other round): the floor, the lean floor, the
 * module on PostgreSQL and the module encrypted; the Redis modes and the
 * other library; each data library alone and the module on it.
 */
const TOGETHER: readonly (readonly ModeId[])[] = [
  ['floor', 'lean', 'postgres', 'encrypted'],
  ['redis', 'unfenced', 'theirs'],
  ...LIBRARIES.map(([id]): ModeId[] => [`${id}-baseline`, id]),
];

/** What BENCH_MODES may name besides modes: the data libraries' modes. */
const MODE_GROUPS: Record<string, readonly ModeId[]> = {
  adapters: LIBRARIES.flatMap(([id]) => [`${id}-baseline` as const, id]),
};

/**
 * The names `variable` lists (comma-separated) of `all`, in `all`'s order;
 * a name of `groups` stands for its members.
 */
function chosen<T extends string>(
  variable: string,
  all: readonly T[],
  fallback: readonly T[] = all,
  groups: Record<string, readonly T[]> = {},
): T[] {
  const names = (process.env[variable]?.split(',') ?? fallback).flatMap(
    (name): readonly string[] =>
      Object.hasOwn(groups, name) ? groups[name] : [name],
  );
  for (const name of names) {
    if (!all.includes(name as T)) {
      throw new Error(
        `${variable}: unknown ${name} (${[...all, ...Object.keys(groups)].join(', ')})`,
      );
    }
  }
  return all.filter((name) => names.includes(name));
}

const MODE_IDS = chosen(
  'BENCH_MODES',
  MODES.map((mode) => mode.id),
  MODES.filter((mode) => !mode.library).map((mode) => mode.id),
  MODE_GROUPS,
);
const SETTING_NAMES = chosen<Setting>('BENCH_MODE_SETTINGS', [
  'light',
  'gateway',
]);

/** One mode in one setting: what a load run drives. */
interface Run extends LoadScenario {
  readonly mode: Mode;
  readonly setting: Setting;
  readonly baseline?: Run;
}

/** The runs of `modes` (the baseline first among them), by setting. */
function plan(modes: readonly Mode[]): Run[] {
  return SETTING_NAMES.flatMap((setting) => {
    let baseline: Run | undefined;
    return modes
      .filter((mode) => setting === 'light' || mode.gateway)
      .map((mode) => {
        const run: Run = {
          name: mode.name,
          path: `/modes/${setting}`,
          connections:
            setting === 'light'
              ? SETTINGS.connections
              : SETTINGS.gatewayConnections,
          mode,
          setting,
          baseline,
          keys: () => () => randomUUID(),
        };
        baseline ??= run;
        return run;
      });
  });
}

/** The runs that `run` is compared with, round by round, in its mode's order. */
function against(runs: readonly Run[], run: Run): Run[] {
  return (run.mode.against ?? []).flatMap((id) =>
    runs.filter(
      (other) => other.setting === run.setting && other.mode.id === id,
    ),
  );
}

/** One run's throughput paired round by round with another's. */
interface Comparison {
  readonly mode: ModeId;
  readonly name: string;
  /** Throughput over the other's within each round (median), and the rounds'. */
  readonly ratio: number;
  readonly interval: MedianInterval;
  readonly range: readonly [number, number];
  readonly ratios: number[];
  readonly p99Ratio: number;
  /** CPU µs per request less the other's, within each round (medians). */
  readonly cpu: CpuPerRequest;
  /** CPU per request over the other's, within each round (medians). */
  readonly cpuRatio: CpuPerRequest;
}

/** A load run, the CPU it cost, and how long it held the pool's connections. */
interface PoolMeasured extends Measured {
  /** Connection-milliseconds a request (see `pool ms` above). */
  readonly poolMs: number | undefined;
}

/** The figures of one run over the rounds, as printed and written. */
interface Row extends LoadRow {
  readonly mode: ModeId;
  readonly setting: Setting;
  /** CPU µs per request, medians of the rounds. */
  readonly cpu: CpuPerRequest;
  /** App CPU µs per request less the baseline's, within each round (median). */
  readonly appOverBaseline?: number;
  /** Connection-milliseconds a request, median of the rounds. */
  readonly poolMs: number | undefined;
  readonly against: readonly Comparison[];
}

function summarize(
  run: Run,
  against: readonly Run[],
  results: Map<Run, Rounds<PoolMeasured>>,
): Row {
  const own = results.get(run)!;
  const rounds = own.rounds;
  const cpuMedian = (of: keyof CpuPerRequest) =>
    medianOf(rounds.map((round) => round.cpu[of]));
  /**
   * The median over the rounds of `combine` of the rounds' CPU `of` per
   * request and `than`'s (unknown where either is, or `combine` says so).
   */
  const paired = (
    than: Measured[],
    of: keyof CpuPerRequest,
    combine: (own: number, other: number) => number | undefined,
  ) =>
    medianOf(
      than.map((round, i) => {
        const [a, b] = [rounds[i].cpu[of], round.cpu[of]];
        return a === undefined || b === undefined ? undefined : combine(a, b);
      }),
    );
  /** The median of the rounds' CPU `of` per request less `than`'s. */
  const cpuOver = (than: Measured[], of: keyof CpuPerRequest) =>
    paired(than, of, (a, b) => a - b);
  /** The median of the rounds' CPU `of` per request over `than`'s. */
  const cpuRatio = (than: Measured[], of: keyof CpuPerRequest) =>
    paired(than, of, (a, b) => (b === 0 ? undefined : a / b));
  const base = run.baseline && results.get(run.baseline)!.rounds;
  const compare = (other: Run): Comparison => {
    const others = results.get(other)!.rounds;
    const ratios = others.map((round, i) => rounds[i].rps / round.rps);
    return {
      mode: other.mode.id,
      name: other.name,
      ratio: median(ratios),
      interval: medianInterval(ratios),
      range: [Math.min(...ratios), Math.max(...ratios)],
      ratios,
      p99Ratio: median(rounds.map((round, i) => round.p99 / others[i].p99)),
      cpu: {
        app: cpuOver(others, 'app'),
        db: cpuOver(others, 'db'),
        sessions: cpuOver(others, 'sessions'),
        redis: cpuOver(others, 'redis'),
      },
      cpuRatio: {
        app: cpuRatio(others, 'app'),
        db: cpuRatio(others, 'db'),
        sessions: cpuRatio(others, 'sessions'),
        redis: cpuRatio(others, 'redis'),
      },
    };
  };
  const row = summarizeRounds(run, own);
  return {
    ...row,
    mode: run.mode.id,
    setting: run.setting,
    cpu: {
      app: cpuMedian('app'),
      db: cpuMedian('db'),
      sessions: cpuMedian('sessions'),
      redis: cpuMedian('redis'),
    },
    appOverBaseline: base && cpuOver(base, 'app'),
    poolMs: medianOf(rounds.map((round) => round.poolMs)),
    against: against.map(compare),
  };
}

/** The median of `values`, unless one is missing. */
function medianOf(values: (number | undefined)[]): number | undefined {
  return values.every((value) => value !== undefined)
    ? median(values as number[])
    : undefined;
}

/** Microseconds as printed; `signed`: with its sign. */
function us(value: number | undefined, signed = false): string {
  return `${signed && value !== undefined && value >= 0 ? '+' : ''}${fixed(value, 0)}`;
}

function report(rows: readonly Row[]): void {
  for (const setting of SETTING_NAMES) {
    const own = rows.filter((row) => row.setting === setting);
    if (own.length === 0) {
      continue;
    }
    console.log('');
    console.log(
      setting === 'light'
        ? `light: no wait, ${SETTINGS.connections} connections`
        : `gateway: the gateway answers after ${SETTINGS.gatewayMs} ms, ${SETTINGS.gatewayConnections} connections`,
    );
    printTable(own, [
      ['mode', -31, (r) => r.scenario],
      ['req/s', 6, (r) => fixed(r.rps, 0)],
      ['p50 ms', 7, (r) => fixed(r.p50, 1)],
      ['p99 ms', 7, (r) => fixed(r.p99, 1)],
      [
        'vs base',
        7,
        (r) => (r.baseline === undefined ? 'base' : `${fixed(r.ratio, 2)}x`),
      ],
      [
        'p99 vs base',
        11,
        (r) => (r.baseline === undefined ? 'base' : `${fixed(r.p99Ratio, 2)}x`),
      ],
      [
        'vs',
        24,
        (r) =>
          r.against
            .map((other) => `${fixed(other.ratio, 2)}x ${other.mode}`)
            .join(', '),
      ],
      ['app µs', 6, (r) => us(r.cpu.app)],
      [
        'app Δ base',
        10,
        (r) => (r.baseline === undefined ? '' : us(r.appOverBaseline, true)),
      ],
      ['PG µs', 6, (r) => us(r.cpu.db)],
      ['sess µs', 7, (r) => us(r.cpu.sessions)],
      ['Redis µs', 8, (r) => us(r.cpu.redis)],
      ['pool ms', 7, (r) => fixed(r.poolMs, 2)],
      [
        'non-2xx',
        8,
        (r) => `${r.non2xx}${r.errors ? ` +${r.errors} err` : ''}`,
      ],
    ]);
  }
  console.log(
    `(${SETTINGS.rounds} rounds x ${SETTINGS.seconds} s per run, interleaved, medians of the rounds; ` +
      `vs base, vs: throughput ratios within each round, medians; µs: CPU per request during the load runs ` +
      `(user + system from /proc over the run / requests served): app = the mode's own process, ` +
      `PG = the whole PostgreSQL server (the bench's own only), sess = its sessions on the mode's own ` +
      `database (the statements' work, without the WAL writer, checkpointer and autovacuum), Redis = the whole redis-server process ` +
      `(whatever its clients: the modes without Redis show what it does meanwhile); app Δ base: app µs ` +
      `less the baseline's within each round, median; pool ms: connection-milliseconds of the app's pool ` +
      `held a request, the pool's size x 1000 / it the most requests a second the pool serves)`,
  );
  for (const row of rows) {
    for (const other of row.against) {
      const { low, high, coverage } = other.interval;
      const theirs = rows.find(
        (r) => r.setting === row.setting && r.mode === other.mode,
      )!;
      const its = theirs.cpu;
      /**
       * CPU `of` a request of both, and the medians of the rounds'
       * differences and ratios.
       */
      const cpu = (label: string, of: keyof CpuPerRequest) =>
        `${label} ${us(row.cpu[of])} µs against ${us(its[of])} µs ` +
        `(${us(other.cpu[of], true)}, ${fixed(other.cpuRatio[of], 2)}x)`;
      console.log(
        `${row.setting}: ${row.scenario} over ${other.name}: ${fixed(other.ratio, 2)}x ` +
          `(rounds ${fixed(other.range[0], 2)}x to ${fixed(other.range[1], 2)}x: ` +
          `${other.ratios.map((r) => r.toFixed(2)).join(', ')}; ` +
          `the median lies in ${fixed(low, 2)}x to ${fixed(high, 2)}x at ${fixed(coverage * 100, 0)} %; ` +
          `p99 ${fixed(other.p99Ratio, 2)}x); ` +
          `CPU a request: ${cpu('app', 'app')}, ${cpu('PG', 'db')}` +
          `${row.cpu.sessions === undefined ? '' : `, ${cpu('its PG sessions', 'sessions')}`}` +
          `${row.cpu.redis === undefined ? '' : `, ${cpu('Redis', 'redis')}`}; ` +
          `pool ms a request ${fixed(row.poolMs, 2)} against ${fixed(theirs.poolMs, 2)}`,
      );
    }
  }
  for (const row of rows.filter((r) => r.mode === 'memory')) {
    const base = rows.find(
      (r) => r.setting === row.setting && r.mode === 'baseline',
    );
    console.log(
      `${row.setting}: the module's own work, on the memory store: app CPU ${us(row.cpu.app)} µs a request ` +
        `against ${us(base?.cpu.app)} µs on the undecorated baseline route ` +
        `(${us(row.appOverBaseline, true)} µs, median of the rounds' differences)`,
    );
  }
  for (const row of rows) {
    if (row.non2xx > 0 || row.errors > 0 || row.replayed > 0) {
      console.log(
        `WARNING ${row.setting}, ${row.scenario}: ${row.non2xx} non-2xx ${JSON.stringify(row.statuses)}, ` +
          `${row.errors} errors, ${row.replayed} replayed (every key is new)`,
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

async function main(): Promise<void> {
  const runId = randomUUID().replaceAll('-', '').slice(0, 12);
  let modes = MODES.filter(
    (mode) =>
      (mode.id === 'baseline' || MODE_IDS.includes(mode.id)) &&
      (mode.gateway || SETTING_NAMES.includes('light')),
  );
  const server = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ durable: true });
  const serverUrl = process.env.DATABASE_URL ?? server!.url;
  const database = `idem_modes_${runId}`;
  const databaseOf = (mode: Mode) => modeDatabaseName(database, mode.id);
  const made: string[] = [];
  let redis: Redis | undefined;
  let theirs: Theirs | undefined;
  let theirsSkipped: string | undefined;
  const apps = new Map<ModeId, SampleProcess>();
  try {
    if (modes.some((mode) => mode.redis)) {
      redis = new Redis(REDIS_URL, {
        lazyConnect: true,
        maxRetriesPerRequest: 1,
      });
      await redis.connect().catch((error: unknown) => {
        throw new Error(
          `Redis at ${REDIS_URL} is not reachable (set BENCH_REDIS_URL, or leave redis and theirs out of BENCH_MODES)`,
          { cause: error },
        );
      });
    }
    if (modes.some((mode) => mode.id === 'theirs')) {
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
        }
      }
      if (theirsSkipped) {
        console.warn(`@node-idempotency/nestjs not compared: ${theirsSkipped}`);
        modes = modes.filter((mode) => mode.id !== 'theirs');
      }
    }
    const env: Record<string, string> = {
      // The in-process gateway stand-in: no gateway in the figures but the
      // gateway setting's wait.
      GATEWAY_URL: '',
      BENCH_GATEWAY_MS: String(SETTINGS.gatewayMs),
      // Each app keeps its connections open while the other modes run, as
      // an application under steady load does: pg closes a connection idle
      // for 10 s, and a mode would otherwise pay, in its own window, for
      // reopening its connections (a backend started, its statements
      // parsed and planned again, its catalog caches filled).
      DATABASE_POOL_IDLE_MS: process.env.DATABASE_POOL_IDLE_MS ?? '0',
      BENCH_REDIS_URL: REDIS_URL,
      BENCH_REDIS_PREFIX: `idempotency-bench-${runId}:`,
      ...(theirs && {
        BENCH_NODE_IDEMPOTENCY_DIR: theirs.dir,
        BENCH_NODE_IDEMPOTENCY_PREFIX: `idempotency-bench-${runId}-theirs`,
        // Its require('@nestjs/common') finds the repository's NestJS.
        NODE_PATH: `${ROOT}node_modules`,
      }),
    };
    const urls = await makeModeDatabases(
      serverUrl,
      database,
      modes.map((mode) => mode.id),
      env,
      made,
    );
    for (const mode of modes) {
      apps.set(
        mode.id,
        await startModeApp(mode.id, {
          ...env,
          DATABASE_URL: urls.get(mode.id)!,
        }),
      );
    }
    const runs = plan(modes);
    const app = (run: Run) => apps.get(run.mode.id)!;
    console.log(
      `modes: ${modes.map((mode) => mode.id).join(', ')}, one app and database each (${database}_<mode>); ` +
        `${runs.length} runs x ${SETTINGS.rounds} rounds x ${SETTINGS.seconds} s` +
        (RATE ? `, ${RATE} requests/s each` : ''),
    );

    const checks: ReplayCheck[] = [];
    for (const mode of modes.filter((m) => m.idempotent)) {
      const [store, library] =
        mode.id === 'theirs'
          ? [
              'Redis',
              `@node-idempotency/nestjs ${theirs!.versions['@node-idempotency/nestjs']}`,
            ]
          : mode.id === 'floor'
            ? ['PostgreSQL', 'the bare SQL floor']
            : mode.id === 'lean'
              ? ['PostgreSQL, a table of its own', 'the lean floor']
              : mode.library
                ? [`PostgreSQL on ${mode.library}`, 'nestjs-idempotency']
                : [
                    mode.name.replace(/^module, | store$/g, ''),
                    'nestjs-idempotency',
                  ];
      checks.push(
        await checkReplay(
          apps.get(mode.id)!,
          urls.get(mode.id)!,
          store,
          library,
          '/modes/light',
        ),
      );
    }
    checks.forEach(printCheck);
    const failed = checks.filter((check) => !check.ok);
    if (failed.length > 0) {
      throw new Error(
        `${failed.map((check) => `${check.library} on ${check.store}`).join(', ')} did not replay as expected: not measured.`,
      );
    }

    // Warm-up (JIT, pools, caches, prepared statements), not measured.
    for (const run of runs) {
      await runLoad({
        ...load(app(run), run, 'warmup'),
        seconds: SETTINGS.warmupSeconds,
      });
    }

    const redisPid = redis && (await localRedisPid(redis));
    // Only a server of the bench's own says what the requests cost it.
    const postmaster = server
      ? await localPostmaster(databaseUrl(serverUrl, database))
      : undefined;
    const together = SETTING_NAMES.flatMap((setting) =>
      TOGETHER.flatMap((ids) => {
        // In the order of TOGETHER, not of the runs.
        const group = ids.flatMap((id) =>
          runs.filter((r) => r.setting === setting && r.mode.id === id),
        );
        return group.length > 1 ? [group] : [];
      }),
    );
    const results = await interleave(
      runs,
      SETTINGS.rounds,
      async (run, round) => {
        await quiesce(app(run));
        const pool = await readPool(app(run));
        const sources = {
          app: app(run).process.pid,
          redis: redisPid,
          postmaster,
          database: databaseOf(run.mode),
        };
        const before = cpuNow(sources);
        const result = await runLoad({
          ...load(app(run), run, `${round}`),
          seconds: SETTINGS.seconds,
          // At a rate, a run is its number of requests, each answered:
          // none is cut off in flight at the end of the run, whose work
          // (a rollback, a release of the key) the run would count
          // without its request.
          ...(RATE && { rate: RATE, amount: RATE * SETTINGS.seconds }),
        });
        const measured = withCpu(result, before, cpuNow(sources));
        const { heldMs } = await readPool(app(run));
        return {
          ...measured,
          poolMs:
            result.requests === 0
              ? undefined
              : (heldMs - pool.heldMs) / result.requests,
        };
      },
      '',
      together,
    );
    const rows = runs.map((run) => summarize(run, against(runs, run), results));
    report(rows);

    const machine = {
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      loadAverage: loadavg()
        .map((value) => value.toFixed(2))
        .join(' '),
      node: process.version,
      postgres: `${await serverVersion(serverUrl)} (${server ? 'embedded, fsync on' : 'DATABASE_URL'})`,
      redis: redis ? serverName(await redis.info('server')) : undefined,
    };
    console.log(
      `machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, load average after ` +
        `${machine.loadAverage}; Node ${machine.node}; PostgreSQL ${machine.postgres}` +
        `${machine.redis ? `; ${machine.redis}` : ''}` +
        `${theirs ? `; @node-idempotency/nestjs ${theirs.versions['@node-idempotency/nestjs']}` : ''}`,
    );
    const json = {
      date: new Date().toISOString(),
      machine,
      settings: {
        modes: modes.map((mode) => mode.id),
        settings: SETTING_NAMES,
        ...SETTINGS,
        rate: RATE,
        gateway: 'in-process stand-in',
        cpu: 'during the load runs, per request served',
        nodeIdempotency: theirs?.versions ?? { skipped: theirsSkipped },
      },
      checks,
      runs: rows.map((row, i) => ({
        ...row,
        rounds: results.get(runs[i])!.rounds,
        ratios: results.get(runs[i])!.ratios,
        p99Ratios: results.get(runs[i])!.p99Ratios,
      })),
    };
    await mkdir(dirname(OUTPUT), { recursive: true });
    await writeFile(OUTPUT, `${JSON.stringify(json, null, 2)}\n`);
    console.log(`\nresults written to ${OUTPUT}`);
  } finally {
    await Promise.all([...apps.values()].map((app) => app.stop()));
    if (redis) {
      await cleanRedis(redis, runId);
      await redis.quit();
    }
    if (theirs) {
      await rm(theirs.dir, { recursive: true, force: true });
    }
    if (server) {
      await server.stop();
    } else {
      for (const name of made) {
        await onServer(
          serverUrl,
          `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`,
        );
      }
    }
  }
}

await main();
