import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Controller, Injectable, Post } from '@nestjs/common';
import { Cluster, Redis } from 'ioredis';
import { runCli } from '../../src/cli/idempotency.cli.js';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { encodeCursor } from '../../src/stores/record-cursor.js';
import { Barrier } from '../utils/barrier.js';
import { assertBuilt } from '../utils/library-build.js';
import {
  startRedisCluster,
  type RedisCluster,
} from '../utils/redis-cluster.js';
import { keysOf, redisInstalled } from '../utils/redis-server.js';
import { describeIf, describeWithServer } from '../utils/server.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import { REDIS } from '../utils/store-subjects.js';

/** What the handler did: its runs, its charges, and where it waits. */
@Injectable()
class Charges {
  runs = 0;
  charges = 0;
  /** Where a run whose body says `hold` waits, after its charge. */
  gate = new Barrier();
}

@Controller('orders')
class OrdersController {
  constructor(
    private readonly charges: Charges,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post()
  @Idempotent()
  async create(): Promise<{ run: number; charge: number }> {
    const run = (this.charges.runs += 1);
    const charge = await this.idempotency.step('charge', () => {
      this.charges.charges += 1;
      return this.charges.charges;
    });
    await this.charges.gate.wait();
    return { run, charge };
  }
}

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

/** The compiled command line, as `npx nestjs-idempotency` runs it. */
const MAIN = fileURLToPath(
  new URL('../../dist/src/cli/main.js', import.meta.url),
);

/** A local port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Runs the compiled command line as a process of its own: its exit code,
 * what it wrote to stderr, and whether it had to be killed (it had not
 * ended within `timeout`: a client left reconnecting keeps it alive).
 */
function runMain(args: readonly string[]): Promise<{
  code: number;
  killed: boolean;
  stdout: string;
  stderr: string;
}> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [MAIN, ...args],
      { timeout: 60_000 },
      (error, stdout, stderr) =>
        resolve({
          code: error ? Number(error.code ?? -1) : 0,
          killed: error?.killed ?? false,
          stdout,
          stderr,
        }),
    );
  });
}

/**
 * The command line on the Redis store (`--url redis://…`, `--prefix`) of a
 * running application: a completed and a running key inspected and
 * listed, a stuck key's reset refused under its live lease and then
 * forced (its handler fenced out, the retry resuming once after its
 * step), a scope forgotten with another kept; `--json` parsed.
 */
describeRedis('the command line, on a Redis store of a running app', () => {
  const prefix = `idempotency-test-cli-${randomUUID().slice(0, 8)}:`;
  const url = `redis://${REDIS.host}:${REDIS.port}`;
  let client: Redis;
  let store: RedisIdempotencyStore;
  let target: StoreApp;
  let charges: Charges;

  beforeAll(async () => {
    client = new Redis(REDIS);
    store = new RedisIdempotencyStore(client, { prefix });
    target = await startStoreApp({
      store,
      controllers: [OrdersController],
      providers: [Charges],
    });
    charges = target.app.get(Charges);
  });
  afterAll(async () => {
    await target?.close();
    await store?.close();
    if (client) {
      await Promise.all(
        (await keysOf(client, prefix)).map((key) => client.unlink(key)),
      );
      await client.quit();
    }
  });

  const cli = async (...args: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli([...args, '--prefix', prefix], {
      out: (text) => (out += text),
      err: (text) => (err += text),
      env: { REDIS_URL: url },
    });
    return { code, out, err };
  };
  const json = async <T = Record<string, unknown>>(...args: string[]) => {
    const { code, out, err } = await cli(...args, '--json');
    expect({ code, err }).toEqual({ code: 0, err: '' });
    return JSON.parse(out) as T;
  };
  const order = (key: string) =>
    fetch(`${target.url}/orders`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key },
    });

  it('inspects a completed key, lists and inspects a running one, resets it (refused, then forced: fenced out, the retry resumes once), forgets a scope', async () => {
    charges.gate.open();
    const done = await order('cli-done');
    expect(done.status).toBe(201);
    const body = await done.text();
    expect(await json('inspect', 'cli-done')).toMatchObject({
      scope: 'global',
      key: 'cli-done',
      status: 'completed',
      method: 'POST',
      response: { status: 201 },
      steps: [],
    });
    const withBody = await json<{ response: { body: string } }>(
      'inspect',
      'cli-done',
      '--body',
    );
    expect(Buffer.from(withBody.response.body, 'base64').toString()).toBe(body);

    // A run held after its charge: in progress, bound by its step.
    charges.gate = new Barrier();
    const held = order('cli-stuck');
    await charges.gate.reached(1);
    const running = await json<{ leaseMs: number; owner: string }>(
      'inspect',
      'cli-stuck',
      '--url',
      url,
    );
    expect(running).toMatchObject({
      status: 'in_progress',
      owner: expect.stringMatching(/^[0-9a-f-]{36}$/),
      bound: true,
      generation: expect.any(String),
      steps: [expect.objectContaining({ step: 'charge' })],
    });
    expect(running.leaseMs).toBeGreaterThan(0);
    const page = await json<{ records: Array<{ key: string }> }>('list');
    expect(page.records).toEqual([
      expect.objectContaining({
        scope: 'global',
        key: 'cli-stuck',
        status: 'in_progress',
      }),
    ]);
    expect((await cli('list')).out).toMatch(
      /^in_progress\tglobal\tcli-stuck\t/,
    );

    const refused = await cli('reset', 'cli-stuck');
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/is being executed: its owner's lease runs/);
    expect(await json('reset', 'cli-stuck', '--force')).toEqual({
      scope: 'global',
      key: 'cli-stuck',
      reset: true,
      fenced: true,
    });
    charges.gate.open();
    // The old owner's completion found no claim of its own.
    expect((await held).status).toBe(503);
    const retry = await order('cli-stuck');
    expect(retry.status).toBe(201);
    // Resumed after its charge: charged once for the key, run once more.
    expect(await retry.json()).toEqual({ run: 3, charge: 2 });
    expect(charges.charges).toBe(2);
    expect((await json('inspect', 'cli-stuck')).status).toBe('completed');

    await store.claim({
      scope: 'other',
      key: 'kept',
      owner: randomUUID(),
      fingerprint: 'fp',
      method: 'POST',
      path: '/x',
      leaseMs: 60_000,
      ttlMs: 3_600_000,
      wait: false,
    });
    expect(
      await json('forget', '--scope', 'global', '--batch-size', '1'),
    ).toEqual({ scope: 'global', records: 2, steps: 0 });
    expect((await cli('inspect', 'cli-done')).code).toBe(1);
    expect((await json('inspect', 'kept', '--scope', 'other')).status).toBe(
      'in_progress',
    );
    expect((await cli('forget', '--scope', 'other', '--key', 'kept')).out).toBe(
      'Forgot 1 records and 0 steps of scope "other", key "kept".\n',
    );
    expect(await keysOf(client, prefix)).toEqual([
      expect.stringMatching(/steps-due$/),
    ]);
  });

  it('takes REDIS_URL when DATABASE_URL is set but empty, as an unset one (a `DATABASE_URL=` line of an env file)', async () => {
    charges.gate = new Barrier();
    charges.gate.open();
    expect((await order('empty-database-url')).status).toBe(201);
    let out = '';
    let err = '';
    const code = await runCli(
      ['inspect', 'empty-database-url', '--prefix', prefix, '--json'],
      {
        out: (text) => (out += text),
        err: (text) => (err += text),
        env: { DATABASE_URL: '', REDIS_URL: url },
      },
    );
    expect({ code, err }).toEqual({ code: 0, err: '' });
    expect(JSON.parse(out)).toMatchObject({
      key: 'empty-database-url',
      status: 'completed',
    });
  });

  it('refuses an option with a value given twice, and changes nothing: `forget --key a --key b` never forgets `b` alone', async () => {
    charges.gate = new Barrier();
    charges.gate.open();
    for (const key of ['twice-a', 'twice-b']) {
      expect((await order(key)).status).toBe(201);
    }
    const usage =
      'Run `nestjs-idempotency --help` for the commands and options.\n';
    expect(
      await cli(
        'forget',
        '--scope',
        'global',
        '--key',
        'twice-a',
        '--key',
        'twice-b',
      ),
    ).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: --key is given more than once: give it once (one command per key).\n${usage}`,
    });
    expect(
      await cli('forget', '--scope', 'elsewhere', '--scope', 'global'),
    ).toEqual({
      code: 2,
      out: '',
      err: `nestjs-idempotency: --scope is given more than once: give it once (one command per value).\n${usage}`,
    });
    for (const key of ['twice-a', 'twice-b']) {
      expect(await json('inspect', key)).toMatchObject({
        key,
        status: 'completed',
      });
    }
  });

  it('refuses a cursor of no node of the deployment as a usage error, as on PostgreSQL', async () => {
    const refused = await cli(
      'list',
      '--cursor',
      encodeCursor(['nowhere:1', '0', '']),
    );
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/names no node of this Redis deployment/);
  });

  it.each(['abc', '-1', '99999999999999999999999'])(
    'refuses a cursor whose scan position is %s as a usage error (Redis would fail it, or read -1 as the end)',
    async (position) => {
      const node = `${REDIS.host}:${REDIS.port}`;
      const cursor = encodeCursor([node, position, '']);
      const refused = await cli('list', '--cursor', cursor);
      expect(refused).toMatchObject({ code: 2, out: '' });
      expect(refused.err).toContain(
        `The cursor "${cursor}" is not one that a page of records returned.`,
      );
    },
  );

  it('refuses a database the server does not have, touching none: exit 1, saying where (ioredis would go on in database 0)', async () => {
    charges.gate = new Barrier();
    charges.gate.open();
    expect((await order('db-kept')).status).toBe(201);
    const refused = await cli(
      'forget',
      '--scope',
      'global',
      '--key',
      'db-kept',
      '--url',
      `${url}/99`,
    );
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(
      /could not connect to redis:\/\/[^ ]+\/99: ERR DB index is out of range/,
    );
    expect(await json('inspect', 'db-kept')).toMatchObject({
      key: 'db-kept',
      status: 'completed',
    });
  });

  it('ends, saying why, when Redis cannot be reached or the prefix is refused: no client is left reconnecting', async () => {
    await assertBuilt();
    const port = await closedPort();
    const unreachable = await runMain([
      'list',
      '--url',
      `redis://127.0.0.1:${port}`,
    ]);
    expect(unreachable).toEqual({
      code: 1,
      killed: false,
      // stdout is the command's answer alone: the store's log lines (the
      // outage) go to stderr with the error.
      stdout: '',
      stderr: expect.stringContaining(
        `could not connect to redis://127.0.0.1:${port}`,
      ),
    });
    expect(unreachable.stderr).toContain(
      `nestjs-idempotency: warning: Redis (redis://127.0.0.1:${port}): connect ECONNREFUSED`,
    );
    const badPrefix = await runMain(['list', '--url', url, '--prefix', 'a{b']);
    expect(badPrefix).toEqual({
      code: 1,
      killed: false,
      stdout: '',
      stderr: expect.stringContaining('Invalid "prefix" of the Redis store'),
    });
  });
});

/**
 * The command line given the URL of one node of a Redis Cluster: the
 * operator's commands reach the keys of every master, as the store's own
 * operations do on a Cluster client.
 */
describeIf(
  redisInstalled(),
  'Redis Cluster',
  'redis-server is not installed to start one',
)('the command line, on a Redis Cluster', () => {
  const prefix = `idempotency-test-cli-cluster-${randomUUID().slice(0, 8)}:`;
  const scope = 'cluster-scope';
  const keys = Array.from({ length: 12 }, (_, i) => `cluster-key-${i}`);
  let cluster: RedisCluster;
  let client: Cluster;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    cluster = await startRedisCluster();
    client = new Cluster([...cluster.nodes]);
    store = new RedisIdempotencyStore(client, { prefix });
  });
  afterAll(async () => {
    await store?.close();
    await client?.quit();
    await cluster?.stop();
  });

  const claimOf = (key: string, owner: string) =>
    store.claim({
      scope,
      key,
      owner,
      fingerprint: 'f'.repeat(64),
      method: 'POST',
      path: '/orders',
      leaseMs: 30_000,
      ttlMs: 600_000,
      wait: false,
    });
  const cli = async (...args: string[]) => {
    let out = '';
    let err = '';
    const [node] = cluster.nodes;
    const code = await runCli(
      [...args, '--prefix', prefix, '--json', '--scope', scope],
      {
        out: (text) => (out += text),
        err: (text) => (err += text),
        env: { REDIS_URL: `redis://${node.host}:${node.port}` },
      },
    );
    return { code, out, err };
  };

  it('lists, inspects and forgets the keys of every master from the URL of one: never one node alone, nor MOVED', async () => {
    for (const [i, key] of keys.entries()) {
      const claimed = await claimOf(key, `owner-${i}`);
      if (claimed.state !== 'claimed') {
        throw new Error(`${key} was not claimed: ${claimed.state}`);
      }
      await store.complete(
        claimed.lease!,
        {
          status: 'completed',
          response: { status: 201, headers: {}, body: Buffer.from(key) },
          ttlMs: 600_000,
        },
        undefined,
      );
    }
    // The keys sit on more than one master: one node alone would miss some.
    const perNode = await Promise.all(
      client.nodes('master').map(async (node) => {
        const found = await keysOf(node, prefix);
        return found.filter((name) => name.endsWith(':record')).length;
      }),
    );
    expect(perNode.filter((count) => count > 0).length).toBeGreaterThan(1);

    const listed = await cli('list', '--status', 'completed');
    expect({ code: listed.code, err: listed.err }).toEqual({
      code: 0,
      err: '',
    });
    expect(
      (JSON.parse(listed.out) as { records: Array<{ key: string }> }).records
        .map((record) => record.key)
        .sort(),
    ).toEqual([...keys].sort());

    for (const key of keys) {
      const inspected = await cli('inspect', key);
      expect({ code: inspected.code, err: inspected.err }).toEqual({
        code: 0,
        err: '',
      });
      expect(JSON.parse(inspected.out)).toMatchObject({
        key,
        status: 'completed',
      });
    }

    const forgotten = await cli('forget');
    expect({ code: forgotten.code, err: forgotten.err }).toEqual({
      code: 0,
      err: '',
    });
    expect(JSON.parse(forgotten.out)).toEqual({
      scope,
      records: keys.length,
      steps: 0,
    });
    for (const key of keys) {
      expect((await claimOf(key, `again-${key}`)).state).toBe('claimed');
    }
  });
});
