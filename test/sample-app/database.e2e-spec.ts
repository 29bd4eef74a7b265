import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import {
  startEmbeddedDatabase,
  type Database,
} from '../../sample-app/database.js';
import { freePort } from '../setup/free-port.js';

/**
 * The sample app's own PostgreSQL (`npm start` without DATABASE_URL), on data
 * directories of the test's: one server runs, then a second start tries its
 * data directory, or its port.
 */
describe('the embedded PostgreSQL of the sample app, started while one runs', () => {
  let dir: string;
  let running: Database;
  let runningDataDir: string;
  let runningPort: number;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'idempotency-sample-db-'));
    // As root, PostgreSQL runs as `postgres`, which must enter it.
    await chmod(dir, 0o755);
    runningDataDir = join(dir, 'running');
    runningPort = await freePort();
    running = await startEmbeddedDatabase({
      dataDir: runningDataDir,
      port: runningPort,
    });
  });
  afterAll(async () => {
    await running?.onApplicationShutdown();
    await rm(dir, { recursive: true, force: true });
  });

  /** Whether the running server still answers on its URL. */
  const answers = async () => {
    const client = new pg.Client({ connectionString: running.url });
    await client.connect();
    try {
      return (await client.query('SELECT 1 AS one')).rows[0].one === 1;
    } finally {
      await client.end();
    }
  };

  it('refuses its data directory on any port, naming the pid that holds it', async () => {
    // PostgreSQL's lock file: the postmaster's pid on line 1.
    const [pid] = (
      await readFile(join(runningDataDir, 'postmaster.pid'), 'utf8')
    ).split('\n');
    const port = await freePort();
    await expect(
      startEmbeddedDatabase({ dataDir: runningDataDir, port }),
    ).rejects.toThrow(
      `The data directory ${runningDataDir} is in use by PostgreSQL (pid ${pid}, port ${runningPort}), probably another \`npm start\`.\n` +
        'Potential solutions:\n' +
        `- stop that \`npm start\` (Ctrl+C), or the server if it was left running: kill ${pid}\n` +
        `- set DATABASE_URL to a server to use instead, e.g. postgres://postgres:postgres@127.0.0.1:${runningPort}/payments to share that one's database`,
    );
    expect(await answers()).toBe(true);
  });

  it('says that its port is taken, not the data directory, for a free data directory', async () => {
    const dataDir = join(dir, 'second');
    await expect(
      startEmbeddedDatabase({ dataDir, port: runningPort }),
    ).rejects.toThrow(
      `Embedded PostgreSQL did not start: port ${runningPort} is in use by another program (the data directory ${dataDir} is free).\n` +
        'Potential solutions:\n' +
        '- set EMBEDDED_PG_PORT to a free port\n' +
        '- set DATABASE_URL to use your own server\n' +
        'PostgreSQL said:\n',
    );
    // Initialised, not running.
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);
    expect(await answers()).toBe(true);
  });

  // Only root can start the server as another user (`postgres`), whose
  // access to the directory this test takes away; as any other user the
  // server runs as that user, and the situation cannot arise.
  const asRoot = process.getuid?.() === 0;
  (asRoot ? it : it.skip)(
    'as root, refuses a data directory the postgres user cannot reach, before creating anything',
    async () => {
      const blocked = join(dir, 'private');
      await mkdir(blocked, { mode: 0o700 });
      const dataDir = join(blocked, 'postgres');
      await expect(startEmbeddedDatabase({ dataDir })).rejects.toThrow(
        `which cannot enter ${blocked} (mode 0700), so it cannot use its data directory ${dataDir}.\n` +
          'Potential solutions:\n' +
          `- chmod o+x ${blocked}\n`,
      );
      expect(await readdir(blocked)).toEqual([]);
    },
  );
});
