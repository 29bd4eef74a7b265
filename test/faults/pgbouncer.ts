import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { freePort } from '../setup/free-port.js';
import { until } from '../utils/barrier.js';

/** Where Debian's `pgbouncer` package installs it, and the PATH. */
export function findPgBouncer(): string | undefined {
  const dirs = [
    ...(process.env.PATH ?? '').split(delimiter),
    '/usr/sbin',
    '/usr/local/sbin',
  ];
  return dirs
    .filter((dir) => dir.length > 0)
    .map((dir) => join(dir, 'pgbouncer'))
    .find((file) => existsSync(file));
}

/**
 * `describe` when a `pgbouncer` executable is installed; otherwise the suite
 * is skipped with a visible reason, unless REQUIRE_PGBOUNCER=1 (as in CI),
 * which makes a missing PgBouncer a failure.
 */
export function describeWithPgBouncer(): typeof describe {
  if (findPgBouncer()) {
    return describe;
  }
  if (process.env.REQUIRE_PGBOUNCER === '1') {
    throw new Error(
      'PgBouncer is required (REQUIRE_PGBOUNCER=1) but no pgbouncer executable is installed (Debian package `pgbouncer`)',
    );
  }
  console.warn(
    'Skipping the PgBouncer tests: no pgbouncer executable is installed (Debian package `pgbouncer`)',
  );
  return describe.skip;
}

/** A running PgBouncer in front of one database. */
export interface PgBouncer {
  /** Connection URL of the database through PgBouncer. */
  readonly url: string;
  /** Everything it logged so far. */
  output(): string;
  /** Server connections it holds to PostgreSQL now, per `SHOW POOLS`. */
  pools(): Promise<PoolRow[]>;
  /** Its server connections to the database, per `SHOW SERVERS`. */
  servers(): Promise<ServerRow[]>;
  /** Shuts it down and removes its files. */
  stop(): Promise<void>;
}

/** A row of PgBouncer's `SHOW POOLS`: clients and servers of one pool. */
export interface PoolRow {
  database: string;
  user: string;
  cl_active: string;
  cl_waiting: string;
  sv_active: string;
  sv_idle: string;
  sv_used: string;
  pool_mode: string;
}

/** A row of PgBouncer's `SHOW SERVERS`: one connection to PostgreSQL. */
export interface ServerRow {
  database: string;
  state: string;
  /** The pid of its backend on the PostgreSQL server. */
  remote_pid: string;
}

/** Options of {@link startPgBouncer}. */
export interface PgBouncerOptions {
  /** `pool_mode` (default `transaction`). */
  poolMode?: 'session' | 'transaction' | 'statement';
  /** `default_pool_size`: server connections per database and user. */
  poolSize?: number;
}

/** A libpq connection-string value, quoted. */
function quoted(value: string): string {
  return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
}

/**
 * Starts PgBouncer on a free loopback port in front of the database that
 * `databaseUrl` names (the URL's credentials log it in to PostgreSQL; its
 * own clients need none), with its configuration in a temporary directory.
 * Resolves once a query goes through it; `stop()` shuts it down.
 */
export async function startPgBouncer(
  databaseUrl: string,
  { poolMode = 'transaction', poolSize = 20 }: PgBouncerOptions = {},
): Promise<PgBouncer> {
  const executable = findPgBouncer();
  if (!executable) {
    throw new Error('No pgbouncer executable is installed.');
  }
  const target = new URL(databaseUrl);
  const database = decodeURIComponent(target.pathname.slice(1));
  if (!/^\w+$/.test(database)) {
    throw new Error(`Database name not supported here: ${database}`);
  }
  const user = decodeURIComponent(target.username) || 'postgres';
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-pgbouncer-'));
  // PgBouncer refuses to run as root: it then runs as `postgres`, which
  // must read its files.
  await chmod(dir, 0o755);
  const server = [
    `host=${quoted(target.hostname)}`,
    `port=${target.port || '5432'}`,
    `dbname=${quoted(database)}`,
    `user=${quoted(user)}`,
    ...(target.password
      ? [`password=${quoted(decodeURIComponent(target.password))}`]
      : []),
  ].join(' ');
  const ini = join(dir, 'pgbouncer.ini');
  await writeFile(
    ini,
    [
      '[databases]',
      `${database} = ${server}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      // No Unix socket: nothing outside the test talks to it.
      'unix_socket_dir =',
      // Clients on the loopback interface log in as the database line says.
      'auth_type = any',
      `admin_users = ${user}`,
      `pool_mode = ${poolMode}`,
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 500',
      'ignore_startup_parameters = extra_float_digits',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn(
    executable,
    [...(asRoot ? ['-u', 'postgres'] : []), ini],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const exited = once(child, 'exit');
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      // Immediate shutdown: the tests stop its clients first.
      child.kill('SIGTERM');
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };
  const url = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
  const query = async <T>(connectionString: string, sql: string) => {
    const client = new pg.Client({ connectionString });
    client.on('error', () => undefined);
    await client.connect();
    try {
      return (await client.query(sql)).rows as T[];
    } finally {
      await client.end();
    }
  };
  try {
    await until(async () => {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`PgBouncer exited before it was ready:\n${output}`);
      }
      return query(url, 'SELECT 1').then(
        () => true,
        () => false,
      );
    }, 'PgBouncer to accept a query');
  } catch (error) {
    await stop();
    throw error;
  }
  const admin = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/pgbouncer`;
  return {
    url,
    output: () => output,
    pools: async () =>
      (await query<PoolRow>(admin, 'SHOW POOLS')).filter(
        (row) => row.database === database,
      ),
    servers: async () =>
      (await query<ServerRow>(admin, 'SHOW SERVERS')).filter(
        (row) => row.database === database,
      ),
    stop,
  };
}
