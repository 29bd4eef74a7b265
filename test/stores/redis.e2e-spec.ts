import { once } from 'node:events';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { IdempotencyConfigurationError } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import type {
  AbandonedKey,
  ClaimRequest,
} from '../../src/interfaces/idempotency-store.interface.js';
import { RedisKeys } from '../../src/stores/redis/redis-keys.js';
import { startRedisCluster } from '../utils/redis-cluster.js';
import {
  describeWithValkeyServer,
  keysOf,
  redisInstalled,
  RedisServer,
  serverOf,
  VALKEY_BINARIES,
} from '../utils/redis-server.js';
import { CLAIM, COMPLETE } from '../../src/stores/redis/redis.scripts.js';
import { describeIf, describeWithServer } from '../utils/server.js';
import { Barrier, until } from '../utils/barrier.js';
import { describeStoreConformance } from './conformance.js';
import { asTheModuleCallsIt, generationOf } from '../utils/store-handles.js';

/** Where a server listens. */
interface Address {
  readonly host: string;
  readonly port: number;
}

const REDIS: Address = { host: '127.0.0.1', port: 6379 };
/** The slot of a key on a Redis Cluster, as ioredis computes it. */
const slotOf = createRequire(import.meta.url)('cluster-key-slot') as (
  key: string,
) => number;
/** A prefix of this run's own: its keys are nobody else's. */
const PREFIX = `idempotency-test-redis-${randomUUID().slice(0, 8)}:`;

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

/** Closes a connection, once its socket has closed. */
async function quit(connection: Redis | Cluster): Promise<void> {
  const ended = once(connection, 'end');
  await connection.quit();
  await ended;
}

/** Deletes every key of the prefix on `client` (one node). */
async function clean(client: Redis, prefix = PREFIX): Promise<void> {
  // One key per command: on a cluster node, keys of several slots in one
  // command are refused (CROSSSLOT).
  await Promise.all(
    (await keysOf(client, prefix)).map((key) => client.unlink(key)),
  );
}

/** Whether the server behind `client` has `SET … IFEQ` (Valkey 8.1, Redis 8.4). */
async function hasIfEq(client: Redis): Promise<boolean> {
  const key = `${PREFIX}if-eq-probe-${randomUUID()}`;
  try {
    await client.call('SET', key, 'value', 'IFEQ', 'other');
    return true;
  } catch (error) {
    if (error instanceof Error && /syntax error/i.test(error.message)) {
      return false;
    }
    throw error;
  }
}

/**
 * The commands a client sends, as MONITOR sees them.
 *
 * Not by ioredis's `monitor()`: that one marks its connection as monitoring
 * only once MONITOR's reply has resolved, a microtask after the read that
 * brought it. The lines of other clients' commands that came in the same
 * read find no command of its own waiting: ioredis fails each with
 * "Command queue state error", and the first of them rejects `monitor()`
 * (it happens whenever other clients are busy on the server, as the other
 * test files are on the shared one: taskforcesh/bullmq#2505). Those lines
 * come before the connection is monitoring, so before any command of the
 * test: they are let go. Any other error fails the start, or the next
 * `take()`.
 */
async function monitorOf(client: Redis) {
  await client.ping();
  const port = (client as unknown as { stream: { localPort: number } }).stream
    .localPort;
  const monitor = client.duplicate({ monitor: true, lazyConnect: false });
  const commands: string[][] = [];
  let started = false;
  let failure: Error | undefined;
  /** Wakes whoever waits for a line, a failure or the start. */
  let wake = () => {};
  const next = () => new Promise<void>((resolve) => (wake = resolve));
  monitor.once('monitoring', () => {
    started = true;
    wake();
  });
  monitor.on('error', (error: Error) => {
    if (started || !error.message.startsWith('Command queue state error')) {
      failure ??= error;
      wake();
    }
  });
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source.endsWith(`:${port}`)) {
      commands.push(args);
    }
    wake();
  });
  /** Waits until `done()`, failing with the monitor's error if it has one. */
  const waitFor = async (done: () => boolean) => {
    for (;;) {
      if (failure) {
        monitor.disconnect();
        throw failure;
      }
      if (done()) {
        return;
      }
      await next();
    }
  };
  await waitFor(() => started);
  // MONITOR shows commands in order: a marker sent after the commands of a
  // test tells that every one of them was seen.
  const settled = async () => {
    const marker = `marker-${randomUUID()}`;
    await client.echo(marker);
    await waitFor(() => commands.some((args) => args[1] === marker));
    // The test's own commands on the client are not the store's.
    return commands.filter(([name]) => name !== 'echo' && name !== 'script');
  };
  return {
    /** The commands seen since the last call, once all have arrived. */
    async take(): Promise<string[][]> {
      const seen = await settled();
      commands.length = 0;
      return seen;
    },
    close: () => monitor.disconnect(),
  };
}

/**
 * The conformance suite on `name`, the server at `server()`, on a plain
 * client, then on one with enableAutoPipelining (ioredis then queues a
 * tick's commands into one write: every command must be one it can
 * pipeline), then with bare leases (a completion then takes the claim's
 * lines from the claim, in the script, instead of sending the record whole).
 */
function conformance(name: string, server: () => Address): void {
  for (const [variant, options, bareLeases] of [
    ['', {}, false],
    [' with enableAutoPipelining', { enableAutoPipelining: true }, false],
    [' with bare leases', {}, true],
  ] as Array<[string, RedisOptions, boolean]>) {
    describeStoreConformance(
      `${name}${variant}`,
      async () => {
        const client = new Redis({ ...server(), ...options });
        const store = new RedisIdempotencyStore(client, {
          prefix: `${PREFIX}conformance:`,
        });
        return {
          store,
          close: async () => {
            await store.close();
            await clean(client);
            await quit(client);
          },
        };
      },
      { resentClaims: true, bareLeases },
    );
  }
}

describeRedis('the Redis store', () => {
  conformance('Redis', () => REDIS);
  storeTests(() => REDIS);
});

/**
 * The Redis store on a Valkey server the test starts (see
 * describeWithValkeyServer for where it finds valkey-server).
 */
describeWithValkeyServer()('the Redis store on Valkey', () => {
  let valkey: RedisServer;
  const address = (): Address => ({ host: '127.0.0.1', port: valkey.port });

  beforeAll(async () => {
    valkey = await (
      await RedisServer.create([], { binaries: VALKEY_BINARIES })
    ).start();
  });
  afterAll(() => valkey?.stop());

  it('runs on Valkey: INFO server names valkey and its version', async () => {
    const client = new Redis(address());
    try {
      expect(await serverOf(client)).toEqual({
        name: 'valkey',
        version: expect.stringMatching(/^\d+\.\d+\.\d+$/),
      });
      expect(await client.info('server')).toMatch(/^server_name:valkey\r?$/m);
    } finally {
      await quit(client);
    }
  });
  it('has SET IFEQ from 8.1 on, which the store completes with (CI runs 8.1)', async () => {
    const client = new Redis(address());
    try {
      const [major, minor] = (await serverOf(client)).version
        .split('.')
        .map(Number);
      const from81 = major > 8 || (major === 8 && minor >= 1);
      expect(await hasIfEq(client)).toBe(from81);
      if (process.env.REQUIRE_BROKERS === '1') {
        expect(from81).toBe(true);
      }
    } finally {
      await quit(client);
    }
  });
  conformance('Valkey', address);
  // In a describe of their own, whose afterAll lets the clients go before
  // this one stops the server.
  describe('its keys, scripts, expiries, pub/sub and client', () =>
    storeTests(address));
});

/**
 * The tests of what the Redis store does on the server at `server()` beyond
 * the conformance suite: its keys, scripts, expiries, pub/sub and client.
 */
function storeTests(server: () => Address): void {
  let client: Redis;
  let store: RedisIdempotencyStore;
  let scope: string;

  beforeAll(() => {
    client = new Redis(server());
    store = asTheModuleCallsIt(
      new RedisIdempotencyStore(client, { prefix: PREFIX }),
    );
  });
  afterAll(async () => {
    await store?.close();
    if (client) {
      await clean(client);
      await quit(client);
    }
  });
  beforeEach(() => {
    scope = `redis-${randomUUID()}`;
  });

  const attempt = (
    key: string,
    overrides: Partial<ClaimRequest> = {},
  ): ClaimRequest => ({
    scope,
    key,
    owner: randomUUID(),
    fingerprint: 'fp',
    method: 'POST',
    path: '/redis',
    leaseMs: 60_000,
    ttlMs: 3_600_000,
    wait: false,
    ...overrides,
  });
  const completion = {
    status: 'completed',
    response: { status: 200, headers: {}, body: Buffer.from('ok') },
    ttlMs: 3_600_000,
  } as const;
  const keys = new RedisKeys(PREFIX);
  const recordOf = (key: string) => keys.record(RedisKeys.id(scope, key));
  const stepsOf = (key: string) => keys.steps(RedisKeys.id(scope, key));
  const generationKeyOf = (key: string) =>
    keys.generation(RedisKeys.id(scope, key));

  it('completes a claim without steps by SET IFEQ where the server has it, writing the record the script writes; where it refuses it, by the script, and stops asking', async () => {
    const ifEq = await hasIfEq(client);
    // A store of its own: it has not tried SET IFEQ yet.
    const fresh = asTheModuleCallsIt(
      new RedisIdempotencyStore(client, { prefix: PREFIX }),
    );
    // The test reads on a client of its own: the monitor sees the store's.
    const reader = client.duplicate();
    // The script, by its SHA1 alone: the server has it, whatever ran before.
    await client.script('LOAD', COMPLETE.lua);
    const monitor = await monitorOf(client);
    const written = {
      ...completion,
      response: {
        status: 201,
        headers: { 'content-type': 'text/plain' },
        body: Buffer.from([0, 10, 255]),
      },
    };
    // Expiry and completion times differ, and the key its record names.
    const recordBytes = async (key: string) =>
      (await reader.getBuffer(recordOf(key)))!
        .toString('latin1')
        .replace(/^c \d+ (\d+) \d+/, 'c <expiry> $1 <completed>')
        .replace(JSON.stringify(key), '<key>');
    try {
      const plain = attempt('if-eq');
      await fresh.claim(plain);
      const claimed = (await reader.get(recordOf('if-eq')))!;
      expect(await fresh.complete(plain, written, undefined)).toEqual({
        fenced: true,
        waiting: false,
      });
      const ttl = String(written.ttlMs);
      const ifEqSet = [
        'set',
        recordOf('if-eq'),
        expect.any(String),
        'PX',
        ttl,
        'IFEQ',
        // As MONITOR shows it: newlines escaped.
        claimed.replaceAll('\n', '\\n'),
      ];
      const script = ['evalsha', COMPLETE.sha, '3', recordOf('if-eq')];
      expect(
        (await monitor.take()).map((args) =>
          args[0] === 'evalsha' ? args.slice(0, 4) : args,
        ),
      ).toEqual([
        // The key's generation first, in the same write: the claim's owner
        // where the key has none, kept for the claim's ttl.
        ['set', generationKeyOf('if-eq'), plain.owner, 'PX', ttl, 'NX'],
        [
          'set',
          recordOf('if-eq'),
          expect.any(String),
          'PX',
          '60000',
          'NX',
          'GET',
        ],
        ['exists', stepsOf('if-eq')],
        ifEqSet,
        // Refused (Redis before 8.4, Valkey before 8.1): the script.
        ...(ifEq ? [] : [script]),
      ]);
      // The same bytes as a completion by the script (a bare lease).
      const bare = attempt('if-eq-bare');
      await fresh.claim(bare);
      await fresh.complete(
        { scope, key: bare.key, owner: bare.owner },
        written,
        undefined,
      );
      expect(await recordBytes('if-eq')).toBe(await recordBytes('if-eq-bare'));
      await monitor.take();

      // A duplicate waits: the claim's value changed, the script decides
      // and tells the owner.
      const awaited = attempt('if-eq-waited', { wait: true });
      await fresh.claim(awaited);
      expect(
        await fresh.claim(attempt('if-eq-waited', { wait: true })),
      ).toMatchObject({ state: 'in_progress' });
      expect(await fresh.complete(awaited, completion, undefined)).toEqual({
        fenced: true,
        waiting: true,
      });
      // Steps of an attempt whose lease ended: the key stays bound to its
      // request (its record holds it), so the claim of the same request is
      // the script's, and so is its completion, which clears them.
      const earlier = attempt('if-eq-steps');
      await fresh.claim(earlier);
      expect(await fresh.saveStep(earlier, 'charge', 'ch_1', 3_600_000)).toBe(
        true,
      );
      await fresh.renew([{ ...earlier, durationMs: 0 }]);
      const later = attempt('if-eq-steps');
      expect(await fresh.claim(later)).toEqual({ state: 'claimed' });
      expect(await fresh.complete(later, completion, undefined)).toEqual({
        fenced: true,
        waiting: false,
      });
      expect(await reader.exists(stepsOf('if-eq-steps'))).toBe(0);
      // A stale owner: fenced off, whichever way it tries. The claim that
      // takes over (the key's generation outlived the lease) is the
      // script's, which reads the generation, but the stale owner's
      // completion still tries SET IFEQ, whose value no longer matches.
      const stale = attempt('if-eq-stale');
      await fresh.claim(stale);
      await fresh.renew([{ ...stale, durationMs: 0 }]);
      const current = attempt('if-eq-stale');
      await fresh.claim(current);
      expect(await fresh.complete(stale, completion, undefined)).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(await reader.get(recordOf('if-eq-stale'))).toMatch(
        new RegExp(`^i- ${current.owner}\n`),
      );
      const names = (await monitor.take()).map(([name]) => name);
      // With SET IFEQ: tried for each claim granted by SET NX without
      // steps; the script only where it did not write. Without: never
      // again, nor the EXISTS with the claims.
      expect(names.filter((name) => name === 'exists')).toHaveLength(
        ifEq ? 6 : 0,
      );
      // Two for each claim (its generation, its record).
      expect(names.filter((name) => name === 'set').length).toBe(
        ifEq ? 12 + 2 : 12,
      );
      // The completions of the waited claim, of the one after steps and of
      // the stale owner; the claims of the waiting duplicate, of the one
      // after steps (its key bound) and of the one that took over the
      // stale owner's (the key had a generation), the step, the two
      // renewals.
      expect(names.filter((name) => name === 'evalsha')).toHaveLength(9);
    } finally {
      monitor.close();
      await quit(reader);
    }
  });

  it('sends the commands of one turn of the event loop in one write to the socket, on a client without auto-pipelining', async () => {
    // One completion first: the store then knows whether the server has
    // SET IFEQ, and whether its claims ask for steps in the same write.
    const first = attempt('turn-first');
    await store.claim(first);
    await store.complete(first, completion, undefined);
    const ifEq = await hasIfEq(client);
    const socket = client.stream as Socket & {
      _write: Socket['_write'];
      _writev: NonNullable<Socket['_writev']>;
    };
    const writes: number[] = [];
    const write = socket._write;
    const writev = socket._writev;
    socket._write = function (chunk, encoding, callback) {
      writes.push(1);
      return write.call(this, chunk, encoding, callback);
    };
    socket._writev = function (chunks, callback) {
      writes.push(chunks.length);
      return writev.call(this, chunks, callback);
    };
    try {
      const claims = Array.from({ length: 10 }, (_, i) => attempt(`turn-${i}`));
      const claimed = await Promise.all(claims.map((c) => store.claim(c)));
      expect(claimed).toEqual(claims.map(() => ({ state: 'claimed' })));
      const completed = await Promise.all(
        claims.map((c) => store.complete(c, completion, undefined)),
      );
      expect(completed).toEqual(
        claims.map(() => ({ fenced: true, waiting: false })),
      );
    } finally {
      socket._write = write;
      socket._writev = writev;
    }
    // Ten claims in one write (each a SET NX of the key's generation, one
    // of its record, and the EXISTS of its steps where the server has SET
    // IFEQ), then ten completions in another.
    expect(writes).toEqual([ifEq ? 30 : 20, 10]);
    expect(socket.writableCorked).toBe(0);
  });

  it("writes the same finished record whether the lease is the store's handle of the claim, carries its claim request (either sent whole) or only scope, key and owner (the script adds the claim lines)", async () => {
    const headers = { 'content-type': 'text/plain', 'x-many': ['1', '2'] };
    const body = Buffer.from([0, 10, 255, 0x69, 10]);
    const request = { fingerprint: 'v2:fp\n"λ"', method: 'PUT', path: '/a/:b' };
    const records = [];
    for (const kind of ['handle', 'request', 'bare'] as const) {
      const key = `same-record-${kind}`;
      // A duplicate waits (the claim is marked), so that the owner is told.
      const claim = attempt(key, { ...request, wait: true });
      await store.claim(claim);
      expect(
        await store.claim(attempt(key, { ...request, wait: true })),
      ).toMatchObject({ state: 'in_progress' });
      await store.saveStep(claim, 'charge', 'ch_1', 3_600_000);
      // The claim request is passed as the store's handle of the claim;
      // a copy of it, as it is.
      const lease =
        kind === 'bare'
          ? { scope: claim.scope, key: claim.key, owner: claim.owner }
          : kind === 'request'
            ? { ...claim }
            : claim;
      const stranger = { ...lease, owner: randomUUID() };
      const written = {
        ...completion,
        response: { status: 201, headers, body },
      };
      expect(await store.complete(stranger, written, undefined)).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(await store.complete(lease, written, undefined)).toEqual({
        fenced: true,
        waiting: true,
      });
      const id = RedisKeys.id(scope, key);
      expect(await client.exists(keys.steps(id))).toBe(0);
      const value = (await client.getBuffer(keys.record(id)))!;
      // The expiry and completion times (ms since the epoch) and the key
      // the record names are the only parts that differ.
      records.push(
        value
          .toString('latin1')
          .replace(/^c \d+ (\d+) \d+/, 'c <expiry> $1 <completed>')
          .replace(JSON.stringify(key), '"<key>"'),
      );
      expect(await store.claim(attempt(key, request))).toEqual({
        state: 'finished',
        record: {
          status: 'completed',
          fingerprint: request.fingerprint,
          response: { status: 201, headers, body },
        },
      });
    }
    expect(records[1]).toBe(records[0]);
    expect(records[2]).toBe(records[0]);
    expect(records[0]).toBe(
      Buffer.concat([
        Buffer.from(
          `c <expiry> 201 <completed>\n${JSON.stringify(request.fingerprint)}\n${JSON.stringify(['PUT', '/a/:b', scope, '<key>'])}\n${JSON.stringify(headers)}\n`,
        ),
        body,
      ]).toString('latin1'),
    );
  });

  it('completes outside any transaction: the transaction argument is ignored', async () => {
    expect(store.completesInTransaction).toBe(false);
    const claim = attempt('no-transaction');
    await store.claim(claim);
    expect(
      await store.complete(claim, completion, { client: 'ignored' }),
    ).toEqual({ fenced: true, waiting: false });
  });

  it('keeps every key of a record in one hash slot, tagged by a digest of scope and key, inside the prefix', async () => {
    const odd = ['k', 'k*', '{k}', '}{', 'k:k', '\u0000{x}\n', 'kλ💳'];
    for (const key of odd) {
      const claim = attempt(key);
      expect(await store.claim(claim)).toEqual({ state: 'claimed' });
      expect(await store.saveStep(claim, 'charge', key, 3_600_000)).toBe(true);
    }
    const written = (await keysOf(client, PREFIX)).filter((key) =>
      odd.some((k) => key.includes(RedisKeys.id(scope, k))),
    );
    // A record, its steps and its generation, for each key: no two keys
    // share a record.
    expect(written).toHaveLength(odd.length * 3);
    const tags = new Set<string>();
    for (const key of written) {
      // Redis hashes the part between the first "{" and the next "}".
      const tag = /^[^{]*\{([^}]*)\}/.exec(key)?.[1];
      expect(key.startsWith(`${PREFIX}{`)).toBe(true);
      expect(tag).toMatch(/^[A-Za-z0-9_-]{43}$/);
      tags.add(tag!);
    }
    expect(tags.size).toBe(odd.length);
    for (const key of odd) {
      const id = RedisKeys.id(scope, key);
      expect(slotOf(keys.steps(id))).toBe(slotOf(keys.record(id)));
      expect(slotOf(keys.generation(id))).toBe(slotOf(keys.record(id)));
      expect(slotOf(keys.record(id))).toBe(slotOf(`{${id}}`));
    }
  });

  it('sends every key name inside the prefix, and each script by its SHA1 once Redis has it, loading it again after SCRIPT FLUSH', async () => {
    const ifEq = await hasIfEq(client);
    // The claim script, by its SHA1 alone: the server has it, whatever ran
    // before.
    await client.script('LOAD', CLAIM.lua);
    // A completion without steps has tried SET IFEQ: where the server
    // refused it, the store's claims no longer send the EXISTS of the key's
    // steps, whatever ran before.
    const tried = attempt('if-eq-tried');
    await store.claim(tried);
    await store.complete(tried, completion, undefined);
    const monitor = await monitorOf(client);
    try {
      const claim = attempt('monitored');
      await store.claim(claim);
      await store.claim(attempt('monitored'));
      await store.saveStep(claim, 'charge', 1, 0);
      await store.readStep(claim, 'charge');
      await store.renew([{ ...claim, durationMs: 60_000 }]);
      await store.notify([claim]);
      await store.complete(claim, completion, undefined);
      await store.collect(10, () => undefined);
      const commands = await monitor.take();
      expect(commands.length).toBeGreaterThanOrEqual(9);
      for (const [name, ...args] of commands) {
        const names =
          name === 'evalsha' || name === 'eval'
            ? args.slice(2, 2 + Number(args[1]))
            : [args[0]];
        for (const key of names) {
          expect(key.startsWith(PREFIX)).toBe(true);
        }
      }
      // A replay is one plain SET NX, which finds the record, after the
      // SET NX of the key's generation, which finds it: no script (where
      // the server has SET IFEQ, the EXISTS of the key's steps goes with
      // them, in the same write).
      const set = (key: string) => [
        [
          'set',
          generationKeyOf(key),
          expect.any(String),
          'PX',
          '3600000',
          'NX',
        ],
        ['set', recordOf(key), expect.any(String), 'PX', '60000', 'NX', 'GET'],
        ...(ifEq ? [['exists', stepsOf(key)]] : []),
      ];
      await store.claim(attempt('monitored'));
      expect(await monitor.take()).toEqual(set('monitored'));
      // A key another attempt holds: its SET NX, then the claim script, by
      // its SHA1 alone now that Redis has it.
      await store.claim(attempt('monitored-held'));
      expect(await monitor.take()).toEqual(set('monitored-held'));
      await store.claim(attempt('monitored-held'));
      expect(await monitor.take()).toEqual([
        ...set('monitored-held'),
        [
          'evalsha',
          CLAIM.sha,
          '2',
          recordOf('monitored-held'),
          generationKeyOf('monitored-held'),
          ...anyArgs(7),
        ],
      ]);
      // The server lost its scripts (a restart, a failover, SCRIPT FLUSH).
      await client.script('FLUSH');
      expect(await store.claim(attempt('monitored-held'))).toMatchObject({
        state: 'in_progress',
      });
      const exists = ifEq ? ['exists'] : [];
      expect((await monitor.take()).map(([name]) => name)).toEqual([
        'set',
        'set',
        ...exists,
        'evalsha',
        'eval',
      ]);
      expect(await client.script('EXISTS', CLAIM.sha)).toEqual([1]);
      await store.claim(attempt('monitored-held'));
      expect((await monitor.take()).map(([name]) => name)).toEqual([
        'set',
        'set',
        ...exists,
        'evalsha',
      ]);
    } finally {
      monitor.close();
    }
  });

  it("binds a key by its record: a step moves the claim's lease into its value, and the record outlives it, released or not renewed, until the step expires; then any request claims it by the plain SET NX", async () => {
    const first = attempt('bound-record', { fingerprint: 'fp-1' });
    expect(await store.claim(first)).toEqual({ state: 'claimed' });
    const unbound = (await client.get(recordOf('bound-record')))!;
    expect(unbound).toMatch(new RegExp(`^i- ${first.owner}\n"fp-1"\n`));
    // A step of 400 ms: the binding ends long before the lease (60 s).
    expect(await store.saveStep(first, 'charge', 'ch_1', 400)).toBe(true);
    const bound = (await client.get(recordOf('bound-record')))!;
    const [, lease, binding] = /^b- (\d+) (\d+) /.exec(bound)!;
    expect(bound).toBe(`b- ${lease} ${binding} ${unbound.slice('i- '.length)}`);
    expect(Number(lease) - Number(binding)).toBeGreaterThan(50_000);
    // The key expires with the later of the two: the lease.
    expect(await client.pttl(recordOf('bound-record'))).toBeGreaterThan(50_000);

    // Released: the record stays, ownerless, for the binding only.
    expect(await store.release(first)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(await client.get(recordOf('bound-record'))).toBe(
      `b- 0 ${binding} ${unbound.slice(unbound.indexOf('\n'))}`,
    );
    expect(await client.pttl(recordOf('bound-record'))).toBeLessThanOrEqual(
      400,
    );
    const other = attempt('bound-record', { fingerprint: 'fp-2' });
    expect(await store.claim(other)).toEqual({
      state: 'in_progress',
      fingerprint: 'fp-1',
      leaseMs: 0,
    });
    expect(await store.readStep(other, 'charge')).toBeUndefined();

    // Once the step expired, Redis has deleted the record: another request
    // claims the key by the plain SET NX, unbound, and never reads the
    // step, which stays for the collector.
    await until(
      async () => (await client.exists(recordOf('bound-record'))) === 0,
      'Redis to expire the bound record with its binding',
    );
    expect(await store.claim(other)).toEqual({ state: 'claimed' });
    expect(await client.get(recordOf('bound-record'))).toMatch(
      new RegExp(`^i- ${other.owner}\n"fp-2"\n`),
    );
    expect(await client.hexists(stepsOf('bound-record'), 's:charge')).toBe(1);
    expect(await store.readStep(other, 'charge')).toBeUndefined();
    // Its claim found steps (the EXISTS in the SET NX's write, where the
    // server has SET IFEQ): it completes by the script, which clears them,
    // not by SET IFEQ, which would leave them.
    expect(await store.complete(other, completion, undefined)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(await client.exists(stepsOf('bound-record'))).toBe(0);
  });

  it('reports the expired steps of each abandoned key once when two instances collect at once', async () => {
    const keys = ['twice-a', 'twice-b', 'twice-c'];
    for (const key of keys) {
      const claim = attempt(key);
      await store.claim(claim);
      // Due at once: as if its request had never come back.
      expect(await store.saveStep(claim, 'charge', `charged ${key}`, 0)).toBe(
        true,
      );
    }
    // The other instance's collection stops once it has read the steps,
    // until this one has collected.
    const other = client.duplicate();
    const read = new Barrier();
    const hgetall = other.hgetall.bind(other);
    Object.assign(other, {
      hgetall: async (...args: Parameters<Redis['hgetall']>) => {
        const hash = await hgetall(...args);
        await read.wait();
        return hash;
      },
    });
    const instance = asTheModuleCallsIt(
      new RedisIdempotencyStore(other, { prefix: PREFIX }),
    );
    const reported: string[] = [];
    const report = (key: AbandonedKey) => {
      if (key.scope === scope) {
        reported.push(`${key.key}: ${JSON.stringify(key.steps)}`);
      }
    };
    try {
      const first = instance.collect(1000, report);
      await Promise.race([read.reached(1), first]);
      await store.collect(1000, report);
      read.open();
      await first;
      // Whichever collected a key, it was reported once.
      expect(reported.sort()).toEqual(
        keys.map(
          (key) =>
            `${key}: ${JSON.stringify([{ step: 'charge', result: `charged ${key}` }])}`,
        ),
      );
      expect(
        await Promise.all(keys.map((key) => client.exists(stepsOf(key)))),
      ).toEqual([0, 0, 0]);
    } finally {
      read.open();
      await instance.close();
      await quit(other);
    }
  });

  it('grants a bound claim sent again by its owner through the script, which renews a lease that ended: never by the SET NX that found its value', async () => {
    const claim = attempt('bound-resent');
    await store.claim(claim);
    expect(await store.saveStep(claim, 'charge', 'ch_1', 3_600_000)).toBe(true);
    // Held: granted again, the lease left as it was.
    expect(await store.claim(claim)).toEqual({ state: 'claimed' });
    const duplicate = await store.claim(attempt('bound-resent'));
    expect(duplicate).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    expect((duplicate as { leaseMs: number }).leaseMs).toBeGreaterThan(50_000);
    // Its lease ended (not renewed in time): the claim sent again takes it
    // a fresh lease, so that a duplicate of the same request is refused.
    await store.renew([{ ...claim, durationMs: 0 }]);
    expect(await store.claim(claim)).toEqual({ state: 'claimed' });
    const refused = await store.claim(attempt('bound-resent'));
    expect(refused).toMatchObject({ state: 'in_progress', fingerprint: 'fp' });
    expect((refused as { leaseMs: number }).leaseMs).toBeGreaterThan(50_000);
    expect(await store.readStep(claim, 'charge')).toEqual({ result: 'ch_1' });
  });

  it("reads a step saved by the previous version (no fingerprint) for any request of its key, never one of another request's fingerprint, and saves none for a lease whose fingerprint is not its claim's", async () => {
    const claim = attempt('legacy-steps', { fingerprint: 'fp-new' });
    await store.claim(claim);
    const expiresAt = Date.now() + 3_600_000;
    await client.hset(
      stepsOf('legacy-steps'),
      's:legacy',
      `${expiresAt} {"id":"ch_old"}`,
      's:foreign',
      `${expiresAt} "fp-other"\n{"id":"ch_other"}`,
      'id',
      RedisKeys.identity(scope, 'legacy-steps'),
    );
    expect(await store.readStep(claim, 'legacy')).toEqual({
      result: { id: 'ch_old' },
    });
    expect(await store.readStep(claim, 'foreign')).toBeUndefined();

    expect(
      await store.saveStep(
        { ...claim, fingerprint: 'fp-other' },
        'charge',
        1,
        3_600_000,
      ),
    ).toBe(false);
    expect(await client.hexists(stepsOf('legacy-steps'), 's:charge')).toBe(0);
    // The claim stays unbound: released, any request claims the key.
    expect(await client.get(recordOf('legacy-steps'))).toMatch(/^i- /);
    await store.release(claim);
    expect(
      await store.claim(attempt('legacy-steps', { fingerprint: 'fp-2' })),
    ).toEqual({ state: 'claimed' });
  });

  it('takes over a finished record past its own expiry while Redis still holds it (the expiry it carries decides)', async () => {
    const finished = attempt('own-expiry');
    await store.claim(finished);
    await store.complete(finished, completion, undefined);
    const record = recordOf('own-expiry');
    const value = (await client.getBuffer(record))!;
    const head = value.subarray(0, value.indexOf('\n')).toString();
    expect(head).toMatch(/^c \d{13} 200 \d{13}$/);
    // Its expiry a second ago, while its key is kept an hour.
    const past = `c ${Date.now() - 1_000} 200 ${Date.now() - 2_000}`;
    await client.set(
      record,
      Buffer.concat([Buffer.from(past), value.subarray(head.length)]),
      'KEEPTTL',
    );
    expect(await client.pttl(record)).toBeGreaterThan(60_000);
    const next = attempt('own-expiry');
    expect(await store.claim(next)).toEqual({ state: 'claimed' });
    // Taken over: the old owner is fenced out, the new one completes.
    expect(await store.complete(finished, completion, undefined)).toEqual({
      fenced: false,
      waiting: false,
    });
    expect(await store.complete(next, completion, undefined)).toEqual({
      fenced: true,
      waiting: false,
    });
  });

  it("keeps a claim for its lease only (its key's PX, renewed), then a finished record for its ttl", async () => {
    const claim = attempt('px', { leaseMs: 120_000, ttlMs: 1_000 });
    await store.claim(claim);
    const claimed = await client.pttl(recordOf('px'));
    expect(claimed).toBeGreaterThan(110_000);
    expect(claimed).toBeLessThanOrEqual(120_000);
    await store.renew([{ ...claim, durationMs: 600_000 }]);
    expect(await client.pttl(recordOf('px'))).toBeGreaterThan(590_000);
    await store.complete(claim, { ...completion, ttlMs: 30_000 }, undefined);
    const finished = await client.pttl(recordOf('px'));
    expect(finished).toBeGreaterThan(25_000);
    expect(finished).toBeLessThanOrEqual(30_000);
  });

  it("keeps the key's generation beside the record: past the lease of a claim, for its ttl; never written by a replay; ended with a record that expires before it", async () => {
    const first = attempt('generation');
    await store.claim(first);
    // The key had none: the claim's owner token starts one.
    expect(generationOf(first)).toBe(first.owner);
    expect(await client.get(generationKeyOf('generation'))).toBe(first.owner);
    expect(await client.pttl(generationKeyOf('generation'))).toBeGreaterThan(
      3_500_000,
    );
    // Its instance died: the lease ran out, and the record with it.
    await store.renew([{ ...first, durationMs: 0 }]);
    expect(await client.exists(recordOf('generation'))).toBe(0);
    // Set back, as if an hour had gone by less a minute: the claim that
    // takes over keeps the generation, for its own ttl from now.
    await client.pexpire(generationKeyOf('generation'), 60_000);
    const next = attempt('generation');
    expect(await store.claim(next)).toEqual({ state: 'claimed' });
    expect(generationOf(next)).toBe(first.owner);
    expect(await client.pttl(generationKeyOf('generation'))).toBeGreaterThan(
      3_500_000,
    );
    // Completed for as long as the claim kept the generation: it stays,
    // and expires first (or in the same ms).
    await store.complete(next, completion, undefined);
    const expiryOf = async (key: string) =>
      Number(await client.call('PEXPIRETIME', key));
    const generationEnds = await expiryOf(generationKeyOf('generation'));
    expect(generationEnds).toBeLessThanOrEqual(
      await expiryOf(recordOf('generation')),
    );
    // A replay finds it: its SET NX writes nothing.
    expect(await store.claim(attempt('generation'))).toMatchObject({
      state: 'finished',
    });
    expect(await client.get(generationKeyOf('generation'))).toBe(first.owner);
    expect(await expiryOf(generationKeyOf('generation'))).toBe(generationEnds);

    // A record kept for less time than its claim kept the generation:
    // the completion (never SET IFEQ, which cannot touch it) ends the
    // generation, so that the key starts a new one once the record expired.
    const short = attempt('generation-short');
    await store.claim(short);
    expect(
      await store.complete(short, { ...completion, ttlMs: 30_000 }, undefined),
    ).toEqual({ fenced: true, waiting: false });
    expect(await client.exists(generationKeyOf('generation-short'))).toBe(0);
    expect(await client.pttl(recordOf('generation-short'))).toBeGreaterThan(
      25_000,
    );
  });

  it('binds a key until its generation ends, by bind() or a release that binds it, keeping the generation; a release that does not frees the key with a new one; a step keeps the generation as long as it binds the key', async () => {
    // bind(): the claim's lease moves into its value, bound until the
    // key's generation ends.
    const live = attempt('bind-live');
    await store.claim(live);
    expect(await store.bind(live)).toBe(true);
    const bound = (await client.get(recordOf('bind-live')))!;
    const [, lease, binding] = /^b- (\d+) (\d+) /.exec(bound)!;
    expect(bound).toMatch(
      new RegExp(`^b- ${lease} ${binding} ${live.owner}\n"fp"\n`),
    );
    // The request's line: method, path, scope, key and the claim's time.
    expect(JSON.parse(bound.split('\n')[2])).toEqual([
      'POST',
      '/redis',
      scope,
      'bind-live',
      expect.any(Number),
    ]);
    const generationEnds =
      Date.now() + (await client.pttl(generationKeyOf('bind-live')));
    expect(Math.abs(Number(binding) - generationEnds)).toBeLessThan(1_000);
    expect(await client.pttl(recordOf('bind-live'))).toBeGreaterThan(3_500_000);

    // A release that binds: the record stays, ownerless, bound as long.
    const kept = attempt('release-bind');
    await store.claim(kept);
    await store.release(kept, true);
    expect(await client.get(recordOf('release-bind'))).toMatch(
      /^b- 0 \d+ \n"fp"\n/,
    );
    expect(await client.pttl(recordOf('release-bind'))).toBeGreaterThan(
      3_500_000,
    );
    expect(await client.get(generationKeyOf('release-bind'))).toBe(kept.owner);
    expect(
      await store.claim(attempt('release-bind', { fingerprint: 'fp-other' })),
    ).toEqual({ state: 'in_progress', fingerprint: 'fp', leaseMs: 0 });
    const retry = attempt('release-bind');
    expect(await store.claim(retry)).toEqual({ state: 'claimed' });
    expect(generationOf(retry)).toBe(kept.owner);

    // A release that does not: record and generation go.
    const dropped = attempt('release-dropped');
    await store.claim(dropped);
    await store.release(dropped);
    expect(await client.exists(recordOf('release-dropped'))).toBe(0);
    expect(await client.exists(generationKeyOf('release-dropped'))).toBe(0);
    const after = attempt('release-dropped', { fingerprint: 'fp-other' });
    expect(await store.claim(after)).toEqual({ state: 'claimed' });
    expect(generationOf(after)).toBe(after.owner);

    // A claim kept its generation for its lease (2 s, its ttl shorter); its
    // step binds the key for an hour, and the generation with it.
    const stepped = attempt('release-bound', { leaseMs: 2_000, ttlMs: 1_000 });
    await store.claim(stepped);
    expect(
      await client.pttl(generationKeyOf('release-bound')),
    ).toBeLessThanOrEqual(2_000);
    expect(await store.saveStep(stepped, 'charge', 'ch_1', 3_600_000)).toBe(
      true,
    );
    expect(await client.pttl(generationKeyOf('release-bound'))).toBeGreaterThan(
      3_500_000,
    );
    await store.release(stepped);
    const resumed = attempt('release-bound');
    expect(await store.claim(resumed)).toEqual({ state: 'claimed' });
    expect(generationOf(resumed)).toBe(stepped.owner);
    expect(await store.readStep(resumed, 'charge')).toEqual({
      result: 'ch_1',
    });
  });

  it('counts failed attempts in a key beside the record, in its hash slot, expiring ttlMs after the last failure', async () => {
    const claim = attempt('poison');
    await store.claim(claim);
    await store.release(claim);
    expect(await store.countFailure({ scope, key: 'poison' }, 60_000)).toBe(1);
    expect(await store.countFailure({ scope, key: 'poison' }, 3_600_000)).toBe(
      2,
    );
    const failures = keys.failures(RedisKeys.id(scope, 'poison'));
    expect(failures).toBe(
      `${recordOf('poison').slice(0, -':record'.length)}:failures`,
    );
    expect(await client.exists(recordOf('poison'))).toBe(0);
    expect(await client.get(failures)).toBe('2');
    expect(await client.pttl(failures)).toBeGreaterThan(3_500_000);
  });

  it('stores a binary body (every byte value, 64 KiB) and replays it byte for byte', async () => {
    const body = Buffer.concat([
      Buffer.from(Array.from({ length: 256 }, (_, byte) => byte)),
      randomBytes(64 * 1024),
    ]);
    const claim = attempt('large');
    await store.claim(claim);
    const headers = { 'content-type': 'application/octet-stream' };
    await store.complete(
      claim,
      { ...completion, response: { status: 200, headers, body } },
      undefined,
    );
    const replay = await store.claim(attempt('large'));
    if (replay.state !== 'finished') {
      throw new Error(`Expected the finished record, got ${replay.state}`);
    }
    const { response } = replay.record;
    expect({ ...response, body: undefined }).toEqual({
      status: 200,
      headers,
      body: undefined,
    });
    // Compared as bytes (a deep equality walks a large Buffer slowly).
    expect(Buffer.compare(response.body, body)).toBe(0);
  });

  it('records a response over maxResponseBytes as not replayable, keeping its status', async () => {
    const small = new RedisIdempotencyStore(client, {
      prefix: PREFIX,
      maxResponseBytes: 1024,
    });
    const headers = { 'content-type': 'text/plain' };
    const fits = 1024 - JSON.stringify(headers).length;
    const respond = (size: number) => ({
      ...completion,
      response: { status: 200, headers, body: Buffer.alloc(size, 0x61) },
    });
    const over = attempt('over');
    await small.claim(over);
    expect(await small.complete(over, respond(fits + 1), undefined)).toEqual({
      fenced: true,
      waiting: false,
    });
    expect(await small.claim(attempt('over'))).toEqual({
      state: 'finished',
      record: expect.objectContaining({
        status: 'not_replayable',
        fingerprint: 'fp',
        response: expect.objectContaining({ status: 200 }),
      }),
    });

    const exact = attempt('exact');
    await small.claim(exact);
    expect(await small.complete(exact, respond(fits), undefined)).toEqual({
      fenced: true,
      waiting: false,
    });
  });

  it.each([
    [{ prefix: 'app:{idempotency}:' }, 'Invalid "prefix" of the Redis store'],
    [{ maxResponseBytes: -1 }, 'Invalid "maxResponseBytes" of the Redis store'],
    [
      { abandonedStepsGraceMs: 1.5 },
      'Invalid "abandonedStepsGraceMs" of the Redis store',
    ],
  ])('refuses the options %p', (options, message) => {
    expect(() => new RedisIdempotencyStore(client, options)).toThrow(
      IdempotencyConfigurationError,
    );
    expect(() => new RedisIdempotencyStore(client, options)).toThrow(message);
  });

  it('wakes the watchers of other instances through pub/sub, and all of them after its subscription came back', async () => {
    const watcher = new RedisIdempotencyStore(client, { prefix: PREFIX });
    const calls: Array<[string?, string?]> = [];
    let arrived: (() => void) | undefined;
    const next = (count: number) =>
      new Promise<void>((resolve) => {
        arrived = () => calls.length >= count && resolve();
        arrived();
      });
    try {
      expect(watcher.watching).toBe(false);
      watcher.watch((s, k) => {
        calls.push(s === undefined ? [] : [s, k]);
        arrived?.();
      });
      // Subscribed: anything may have completed before, so all are woken.
      await next(1);
      expect(watcher.watching).toBe(true);
      const weird = attempt('{k}"\n💳');
      await store.notify([weird]);
      await next(2);
      expect(calls).toEqual([[], [scope, '{k}"\n💳']]);

      // The subscription's connection drops: reconnected, it wakes all.
      const subscriber = (
        watcher as unknown as { subscriber: { stream: { localPort: number } } }
      ).subscriber;
      await client.client(
        'KILL',
        'ADDR',
        `127.0.0.1:${subscriber.stream.localPort}`,
      );
      await next(3);
      expect(calls[2]).toEqual([]);
      expect(watcher.watching).toBe(true);
      await store.notify([attempt('after')]);
      await next(4);
      expect(calls[3]).toEqual([scope, 'after']);
    } finally {
      await watcher.close();
    }
    expect(watcher.watching).toBe(false);
  });

  it('connects a client of its own from options, loading ioredis then, and closes it', async () => {
    const { host, port } = server();
    const own = await RedisIdempotencyStore.connect(`redis://${host}:${port}`, {
      prefix: PREFIX,
    });
    // A claim of a key without steps comes with the store's handle, which
    // the module hands back to the completion (SET IFEQ of the value the
    // claim wrote).
    const claim = attempt('own-client');
    expect(await own.claim(claim)).toEqual({
      state: 'claimed',
      // A generation of its own: the key had none.
      generation: claim.owner,
      lease: expect.objectContaining({
        scope: claim.scope,
        key: claim.key,
        owner: claim.owner,
        fingerprint: claim.fingerprint,
      }),
    });
    // One retry, not ioredis's 20: a 503 comes promptly while Redis is down.
    // The store batches its writes itself: no auto-pipelining.
    expect((own.client as Redis).options).toMatchObject({
      maxRetriesPerRequest: 1,
      enableAutoPipelining: false,
    });
    const told = await RedisIdempotencyStore.connect({
      ...server(),
      maxRetriesPerRequest: 3,
    });
    expect((told.client as Redis).options.maxRetriesPerRequest).toBe(3);
    await told.close();
    await own.close();
    const closed = own.client as Redis;
    if (closed.status !== 'end') {
      await once(closed, 'end');
    }
    expect(closed.status).toBe('end');
  });

  it('refuses to connect to a database the server does not have, instead of working in database 0', async () => {
    const { host, port } = server();
    await expect(
      RedisIdempotencyStore.connect(`redis://${host}:${port}/99`),
    ).rejects.toThrow(
      new RegExp(
        `^The Redis store could not connect to redis://${host}:${port}/99: ERR `,
      ),
    );
    await expect(
      RedisIdempotencyStore.connect({ ...server(), db: 99 }),
    ).rejects.toBeInstanceOf(IdempotencyConfigurationError);
  });
}

/**
 * The cluster the Redis Cluster conformance runs on: the one
 * REDIS_CLUSTER_NODES names (host:port,...), else one the test starts from
 * the redis-server binary, else none (skipped, saying so; a failure under
 * REQUIRE_BROKERS=1, as in CI).
 */
const clusterNodes = process.env.REDIS_CLUSTER_NODES;
const canStartCluster = !clusterNodes && redisInstalled();
describeIf(
  Boolean(clusterNodes) || canStartCluster,
  'Redis Cluster',
  'REDIS_CLUSTER_NODES names no cluster, and redis-server is not installed to start one',
)('the Redis store on a Cluster', () =>
  clusterConformance('Redis Cluster', async () =>
    canStartCluster
      ? startRedisCluster()
      : {
          nodes: (clusterNodes ?? '').split(',').map((node) => {
            const [host, port] = node.split(':');
            return { host, port: Number(port) };
          }),
        },
  ),
);

describeWithValkeyServer()('the Redis store on a Valkey Cluster', () =>
  clusterConformance('Valkey Cluster', () =>
    startRedisCluster(3, VALKEY_BINARIES),
  ),
);

/**
 * The conformance suite on the cluster `reach()` gives: its masters, and
 * how to stop it if the test started it.
 */
function clusterConformance(
  name: string,
  reach: () => Promise<{
    readonly nodes: readonly Address[];
    stop?(): Promise<void>;
  }>,
): void {
  describeStoreConformance(
    name,
    async () => {
      const reached = await reach();
      const cluster = new Cluster([...reached.nodes]);
      const store = new RedisIdempotencyStore(cluster, { prefix: PREFIX });
      return {
        store,
        close: async () => {
          try {
            await store.close();
            for (const node of cluster.nodes('master')) {
              await clean(node);
            }
            await quit(cluster);
          } finally {
            await reached.stop?.();
          }
        },
      };
    },
    { resentClaims: true },
  );
}

/** `n` arguments of any value. */
function anyArgs(n: number): unknown[] {
  return Array.from({ length: n }, () => expect.any(String));
}
