import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Redis, type RedisOptions } from 'ioredis';
import type { IdempotencyStore } from '../../src/index.js';
import { DEFAULT_SCOPE, type ClaimOutcome } from '../../src/stores/index.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { RedisKeys } from '../../src/stores/redis/redis-keys.js';
import {
  decodeRecord,
  type RedisRecord,
} from '../../src/stores/redis/redis-record.js';
import { COMPLETE } from '../../src/stores/redis/redis.scripts.js';
import {
  PaymentLoad,
  paymentFor,
  postPayment,
  type LoadAttempt,
  type PaymentAttempt,
} from '../faults/outage-load.js';
import { Barrier, until } from '../utils/barrier.js';
import { clientReady } from '../utils/redis-command-faults.js';
import { assertBuilt } from '../utils/library-build.js';
import { inProgress, UNAVAILABLE } from '../utils/problems.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { describeWithServer } from '../utils/server.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import { TcpGate } from '../utils/tcp-gate.js';
import {
  dynamoSubject,
  REDIS,
  redisSubject,
  type Subject,
} from '../utils/store-subjects.js';
import { PaymentsController, Runs } from './faults.module.js';
import {
  describeWithRedisServer,
  keysOf,
  RedisServer,
} from '../utils/redis-server.js';

/*
 * Faults of the stores other than PostgreSQL: a Redis server of the test's
 * own killed and restarted under load (without persistence, then with an
 * AOF fsynced at every write), and an instance killed (SIGKILL) with
 * requests inside its handler, on Redis and on DynamoDB.
 *
 * The killed instance is the compiled library: needs `npm run build` first
 * (`npm test` builds before it runs jest).
 */

/** Records what `store` answered to each claim, by key. */
function observeClaims(
  store: IdempotencyStore,
): Map<string, Array<ClaimOutcome['state']>> {
  const outcomes = new Map<string, Array<ClaimOutcome['state']>>();
  const claim = store.claim.bind(store);
  store.claim = async (request) => {
    const outcome = await claim(request);
    outcomes.set(request.key, [
      ...(outcomes.get(request.key) ?? []),
      outcome.state,
    ]);
    return outcome;
  };
  return outcomes;
}

const ready = clientReady;

/** Parses an attempt's JSON body. */
const bodyOf = (attempt: PaymentAttempt) =>
  JSON.parse(attempt.body!.toString()) as {
    execution: number;
    charge: { id: string; by: string };
  };

/** The module's 503, as the load sees it. */
function expectUnavailable(attempt: PaymentAttempt): void {
  expect({
    key: attempt.key,
    status: attempt.status,
    contentType: attempt.contentType,
    retryAfter: attempt.retryAfter,
    body: JSON.parse(attempt.body!.toString()) as unknown,
  }).toEqual({
    key: attempt.key,
    status: 503,
    contentType: expect.stringMatching(/^application\/problem\+json/),
    retryAfter: '1',
    body: UNAVAILABLE,
  });
}

/**
 * Sends `POST /payments` for `key` until it is not refused with a 409,
 * waiting what each 409's Retry-After says (the server's delay, not the
 * test's).
 */
async function untilNotInProgress(
  url: string,
  key: string,
): Promise<{
  readonly last: PaymentAttempt;
  readonly refusals: ReadonlyArray<{ sentAt: number; retryAfter: number }>;
}> {
  const refusals: Array<{ sentAt: number; retryAfter: number }> = [];
  for (;;) {
    const sentAt = Date.now();
    const last = await postPayment(url, key);
    if (last.status !== 409) {
      return { last, refusals };
    }
    expect({
      key,
      contentType: last.contentType,
      body: JSON.parse(last.body!.toString()) as unknown,
    }).toEqual({
      key,
      contentType: expect.stringMatching(/^application\/problem\+json/),
      body: inProgress(key),
    });
    refusals.push({ sentAt, retryAfter: Number(last.retryAfter) });
    await new Promise((resolve) =>
      setTimeout(resolve, Number(last.retryAfter) * 1000),
    );
  }
}

/**
 * The figures the tests measured, printed together once the file is done:
 * one entry of the console's output, ahead of any failure's report.
 */
const figures: string[] = [];
const report = (line: string) => figures.push(line);
afterAll(() => {
  if (figures.length > 0) {
    console.log(figures.join('\n'));
  }
});

const describeRestart = describeWithRedisServer();
const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRestart('a Redis server restarted under load', () => {
  const AOF_ALWAYS = ['--appendonly', 'yes', '--appendfsync', 'always'];
  const NO_PERSISTENCE = ['--appendonly', 'no'];
  /** Fails a command after one reconnection attempt instead of twenty. */
  const FAIL_FAST: RedisOptions = { maxRetriesPerRequest: 1 };
  /** Requests sent at once by the load of new keys. */
  const CLIENTS = 16;
  /**
   * What a request may take beyond the client's own delays: the backlog of
   * an outage answered at once, on a loaded machine.
   */
  const BACKLOG_MS = 3_000;

  /**
   * The delays of `client`'s reconnection attempts: until it fails the
   * commands it holds (its `maxRetriesPerRequest` attempts), and the longest
   * it waits between two attempts (so, after a restart, before it sees the
   * server).
   */
  function retrySchedule(client: Redis): {
    flushMs: number;
    maxDelayMs: number;
  } {
    const { retryStrategy, maxRetriesPerRequest } = client.options;
    const delay = (attempt: number) => Number(retryStrategy!(attempt) ?? 0);
    const attempts = Array.from({ length: 100 }, (_, n) => delay(n + 1));
    return {
      flushMs: attempts
        .slice(0, maxRetriesPerRequest!)
        .reduce((sum, ms) => sum + ms, 0),
      maxDelayMs: Math.max(...attempts),
    };
  }

  let server: RedisServer | undefined;
  let apps: Array<{ close(): Promise<void> }> = [];
  let loads: PaymentLoad[] = [];
  afterEach(async () => {
    // A failed test leaves its loads running.
    await Promise.all(loads.map((load) => load.stop()));
    loads = [];
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await server?.stop();
    server = undefined;
  });

  /**
   * An application on a Redis store whose client (with `clientOptions`)
   * reaches the test's server, with the module's `lease`, closed after the
   * test.
   */
  async function appOn(
    clientOptions: RedisOptions,
    lease: string,
    prefix = `idempotency-restart-${randomUUID().slice(0, 8)}:`,
  ) {
    const client = new Redis({
      host: '127.0.0.1',
      port: server!.port,
      ...clientOptions,
    });
    // ioredis reports every failed reconnection; the answers tell the rest.
    client.on('error', () => undefined);
    const store = new RedisIdempotencyStore(client, { prefix });
    const claims = observeClaims(store);
    const target = await startStoreApp({
      store,
      controllers: [PaymentsController],
      providers: [Runs],
      idempotency: { lease },
    });
    const instance = {
      client,
      store,
      claims,
      url: target.url,
      runs: target.app.get(Runs),
      async close() {
        await target.close();
        client.disconnect();
      },
    };
    apps.push(instance);
    return instance;
  }

  it.each([
    {
      redis: 'without persistence',
      config: NO_PERSISTENCE,
      durable: false,
      client: 'maxRetriesPerRequest: 1',
      options: FAIL_FAST,
      unavailableBefore: 8,
    },
    {
      redis: 'with AOF and appendfsync always',
      config: AOF_ALWAYS,
      durable: true,
      client: 'maxRetriesPerRequest: 1',
      options: FAIL_FAST,
      unavailableBefore: 8,
    },
    {
      redis: 'without persistence',
      config: NO_PERSISTENCE,
      durable: false,
      client: "ioredis's defaults",
      options: {},
      unavailableBefore: 1,
    },
  ])(
    'killed $redis, its client on $client: 503s while it is down, the same app serves after the restart; a key completed before is replayed only if Redis persisted it',
    async ({
      redis,
      config,
      durable,
      client: clientName,
      options,
      unavailableBefore,
    }) => {
      server = await (await RedisServer.create(config)).start();
      const instance = await appOn(options, '3s');
      const { url } = instance;
      // A request waits for the client's retries to fail its commands
      // (ioredis's defaults: 20 retries, 10.5 s), or for the restart and the
      // client's next attempt: what bounds an answer, with the restart's
      // time measured below.
      const { flushMs, maxDelayMs } = retrySchedule(instance.client);
      const hangMs = flushMs + maxDelayMs + 30_000;
      const isNew = (a: LoadAttempt) => a.status === 201 && !a.replayed;

      const load = new PaymentLoad(url, 'new-', CLIENTS, hangMs).start();
      loads.push(load);
      await load.until(
        (all) => all.filter(isNew).length >= 40,
        '40 payments before the outage',
      );
      // One client repeats keys completed before the outage, one at a time.
      const repeated = load.attempts
        .filter(isNew)
        .slice(0, 20)
        .map((a) => a.key);
      const duplicates = new PaymentLoad(
        url,
        '',
        1,
        hangMs,
        (sent) => repeated[sent % repeated.length],
      ).start();
      loads.push(duplicates);
      await duplicates.until(
        (all) => all.filter((a) => a.replayed).length >= 5,
        'duplicates replayed before the outage',
      );

      load.phase = duplicates.phase = 'down';
      // When the client tries to reconnect: on a busy machine its timers
      // fire late, and the answers with them. The bounds below follow the
      // schedule it kept, not the one it was given.
      const tries = instance.client.options.maxRetriesPerRequest ?? 0;
      const reconnections: number[] = [];
      // It fails the commands it holds once it has tried that many times.
      const retried = new Promise<void>((resolve) => {
        const onReconnecting = () => {
          reconnections.push(Date.now());
          if (reconnections.length >= tries) {
            resolve();
          }
        };
        instance.client.on('reconnecting', onReconnecting);
        if (tries === 0) {
          resolve();
        }
      });
      const killedAt = Date.now();
      await server.kill();
      await retried;
      const flushedMs = Math.max(
        flushMs,
        (reconnections[tries - 1] ?? killedAt) - killedAt,
      );
      await load.until(
        (all) =>
          all.filter((a) => a.status === 503).length >= unavailableBefore,
        '503s while Redis is down',
        maxDelayMs + 15_000,
      );
      const restartedAt = Date.now();
      await server.start();
      await ready(instance.client);
      const gaps = reconnections.slice(1).map((at, n) => at - reconnections[n]);
      const boundMs =
        flushedMs +
        (Date.now() - restartedAt) +
        Math.max(maxDelayMs, ...gaps) +
        BACKLOG_MS;
      const reconnectedAt = Date.now();
      load.phase = duplicates.phase = 'up';
      await load.until(
        (all) => all.filter((a) => a.sentIn === 'up' && isNew(a)).length >= 40,
        '40 payments after the restart',
      );
      await duplicates.until(
        (all) => all.filter((a) => a.sentIn === 'up').length >= 20,
        'duplicates after the restart',
      );
      const attempts = [...(await load.stop()), ...(await duplicates.stop())];

      // Every request got an answer in time: a success or the module's 503,
      // and the 503 only while Redis was down or reconnecting.
      for (const attempt of attempts) {
        expect({ key: attempt.key, outcome: attempt.outcome }).toEqual({
          key: attempt.key,
          outcome: 'answered',
        });
        const { key, sentIn, status } = attempt;
        const ms = attempt.answeredAt! - attempt.sentAt!;
        expect({
          key,
          sentIn,
          status,
          ms,
          boundMs,
          late: ms > boundMs,
        }).toMatchObject({ late: false });
        if (attempt.status !== 201) {
          expectUnavailable(attempt);
          expect(attempt.sentAt!).toBeLessThan(reconnectedAt);
          expect(attempt.answeredAt!).toBeGreaterThan(killedAt);
        }
      }
      const unavailable = attempts.filter((a) => a.status === 503);
      expect(unavailable.length).toBeGreaterThanOrEqual(unavailableBefore);
      // No handler ran without the store granting its key.
      const { runs, claims } = instance;
      const granted = (key: string) =>
        (claims.get(key) ?? []).filter((state) => state === 'claimed').length;
      const unclaimed = () =>
        [...runs.handler].filter(([key, n]) => n > granted(key));
      expect(unclaimed()).toEqual([]);
      // The restarted server had no script: the store sent each one again
      // (EVAL after NOSCRIPT) and serves on the same client (every
      // completion is a script; a free key's claim is a plain SET).
      const admin = new Redis({ host: '127.0.0.1', port: server.port });
      try {
        const stats = await admin.info('errorstats');
        expect(stats).toMatch(/errorstat_NOSCRIPT:count=[1-9]/);
        expect(await admin.script('EXISTS', COMPLETE.sha)).toEqual([1]);
      } finally {
        admin.disconnect();
      }

      // Duplicates answered before the outage replayed the first response.
      const original = (key: string) =>
        load.attempts.find((a) => a.key === key && isNew(a))!;
      for (const duplicate of duplicates.attempts.filter(
        (a) => a.answeredAt! < killedAt,
      )) {
        expect(duplicate.replayed).toBe(true);
        expect(duplicate.body!.equals(original(duplicate.key).body!)).toBe(
          true,
        );
      }

      // Keys completed before the kill, retried once Redis is back (after
      // the leases of the claims the outage left have run out).
      const completedBefore = load.attempts
        .filter((a) => isNew(a) && a.answeredAt! < killedAt)
        .map((a) => a.key);
      const allKeys = [...new Set(attempts.map((a) => a.key))];
      const retries = new Map<string, PaymentAttempt>();
      await Promise.all(
        allKeys.map(async (key) =>
          retries.set(key, (await untilNotInProgress(url, key)).last),
        ),
      );
      for (const key of allKeys) {
        expect({ key, status: retries.get(key)!.status }).toEqual({
          key,
          status: 201,
        });
      }
      for (const key of completedBefore) {
        const retry = retries.get(key)!;
        if (durable) {
          // Persisted: replayed byte for byte, the handler ran once.
          expect({
            key,
            replayed: retry.replayed,
            runs: runs.handler.get(key),
          }).toEqual({ key, replayed: true, runs: 1 });
          expect(retry.body!.equals(original(key).body!)).toBe(true);
        } else {
          // Lost with the restart: the handler ran again, on the retry or
          // on a duplicate sent after the restart.
          expect({ key, runs: runs.handler.get(key) }).toEqual({
            key,
            runs: 2,
          });
          expect(bodyOf(retry).execution).toBe(2);
        }
      }
      // A key whose request failed ran at most once more, on its retry.
      for (const key of allKeys) {
        expect(runs.handler.get(key) ?? 0).toBeLessThanOrEqual(2);
      }
      expect(unclaimed()).toEqual([]);

      const reExecuted = completedBefore.filter(
        (key) => runs.handler.get(key) === 2,
      ).length;
      const latency = (list: readonly LoadAttempt[]) =>
        list.length === 0
          ? '-'
          : `${Math.min(...list.map((a) => a.answeredAt! - a.sentAt!))}–${Math.max(...list.map((a) => a.answeredAt! - a.sentAt!))} ms`;
      const count = (phase: string, status: number) =>
        attempts.filter((a) => a.sentIn === phase && a.status === status)
          .length;
      report(
        `Redis ${redis}, client ${clientName}: ${attempts.length} requests ` +
          `(${load.attempts.length} new keys, ${duplicates.attempts.length} duplicates of ${repeated.length} completed keys); ` +
          `down ${reconnectedAt - killedAt} ms (kill to client ready); ` +
          `in flight at the kill: ${count('before', 503)} × 503; ` +
          `sent while down: ${count('down', 503)} × 503, ${count('down', 201)} × 201 after the restart; ` +
          `503 latency ${latency(unavailable)}; longest answer ${Math.max(...attempts.map((a) => a.answeredAt! - a.sentAt!))} ms; ` +
          `${completedBefore.length} keys completed before the kill, retried: ${reExecuted} executed again, ` +
          `${completedBefore.length - reExecuted} replayed; handler runs without a claim: 0; ` +
          `${Runs.total(runs.handler)} handler runs for ${allKeys.length} keys`,
      );
    },
    90_000,
  );

  it.each([
    {
      redis: 'with AOF and appendfsync always',
      config: AOF_ALWAYS,
      durable: true,
    },
    { redis: 'without persistence', config: NO_PERSISTENCE, durable: false },
  ])(
    'a duplicate waiting on another instance while Redis ($redis) restarts gets an answer once its subscription is back',
    async ({ config, durable }) => {
      server = await (await RedisServer.create(config)).start();
      const prefix = `idempotency-waiters-${randomUUID().slice(0, 8)}:`;
      // Longer than the test: only a notification ends the wait in time.
      const owner = await appOn(FAIL_FAST, '20s', prefix);
      const other = await appOn(FAIL_FAST, '20s', prefix);
      await until(
        () => Promise.resolve(other.store.watching),
        'the other instance to subscribe',
      );
      const admin = new Redis({ host: '127.0.0.1', port: server.port });
      admin.on('error', () => undefined);
      apps.push({ close: () => Promise.resolve(admin.disconnect()) });
      const key = randomUUID();
      const record = new RedisKeys(prefix).record(
        RedisKeys.id(DEFAULT_SCOPE, key),
      );
      const hold = new Barrier();
      owner.runs.holds.set(key, hold);
      const timed = (url: string) =>
        postPayment(`${url}/waited`, key, 60_000).then((answer) => ({
          ...answer,
          at: Date.now(),
        }));
      const first = timed(owner.url);
      await hold.reached();
      const duplicate = timed(other.url);
      // Its claim answered (not only written: a reply lost with the kill
      // would be sent again after the restart), the duplicate waits.
      await until(
        async () =>
          (other.claims.get(key) ?? []).length === 1 &&
          isWaitedFor(await recordAt(admin, record)),
        'the duplicate to wait',
      );
      expect(other.claims.get(key)).toEqual(['in_progress']);

      await server.kill();
      await server.start();
      await Promise.all([ready(owner.client), ready(other.client)]);
      // Subscribed again, the other instance wakes its waiters: the
      // duplicate claims once more.
      await until(
        () => Promise.resolve((other.claims.get(key) ?? []).length >= 2),
        'the duplicate to look at the key again',
      );
      expect(other.store.watching).toBe(true);
      if (durable) {
        // The claim survived: the duplicate waits for it again.
        expect(other.claims.get(key)).toEqual(['in_progress', 'in_progress']);
        hold.open();
        const executed = await first;
        const replayed = await duplicate;
        expect({
          first: [executed.status, executed.replayed],
          duplicate: [replayed.status, replayed.replayed],
          runs: Runs.total(owner.runs.handler) + Runs.total(other.runs.handler),
        }).toEqual({
          first: [201, false],
          duplicate: [201, true],
          runs: 1,
        });
        expect(replayed.body!.equals(executed.body!)).toBe(true);
        // Woken by the completion's notification, not by the lease.
        expect(replayed.at - executed.at).toBeLessThan(5_000);
        expect(other.claims.get(key)).toEqual([
          'in_progress',
          'in_progress',
          'finished',
        ]);
        report(
          `Redis ${config.join(' ')} restarted while a duplicate waited on another instance: replayed (handler ran once), ` +
            `answered ${replayed.at - executed.at} ms after the first (its lease had ~20 s left)`,
        );
        return;
      }
      // The claim was lost: the duplicate finds the key free and runs the
      // handler while the first still runs; the first's completion is then
      // fenced out (its claim is no longer its own): 503.
      const executed = await duplicate;
      expect(other.claims.get(key)).toEqual(['in_progress', 'claimed']);
      expect([executed.status, executed.replayed]).toEqual([201, false]);
      hold.open();
      const fenced = await first;
      expectUnavailable(fenced);
      expect({
        owner: owner.runs.handler.get(key),
        other: other.runs.handler.get(key),
      }).toEqual({ owner: 1, other: 1 });
      const retry = await postPayment(`${owner.url}/waited`, key);
      expect(retry.replayed).toBe(true);
      expect(retry.body!.equals(executed.body!)).toBe(true);
      report(
        `Redis ${config.join(' ')} restarted while a duplicate waited on another instance: ` +
          `the duplicate ran the handler (2 runs), the first got 503, its retry replays the duplicate's response`,
      );
    },
  );

  it('boots while Redis is unreachable: 503 until it is up, then serves on the same client and subscribes', async () => {
    server = await RedisServer.create(NO_PERSISTENCE);
    const instance = await appOn(FAIL_FAST, '3s');
    const { url } = instance;
    const key = randomUUID();
    const refused = await Promise.all([
      postPayment(url, key),
      postPayment(`${url}/waited`, key),
    ]);
    refused.forEach(expectUnavailable);
    expect(instance.store.watching).toBe(false);
    expect(instance.runs.handler.size).toBe(0);

    await server.start();
    await ready(instance.client);
    await until(
      () => Promise.resolve(instance.store.watching),
      'the subscription of completions',
    );
    const executed = await postPayment(url, key);
    const replayed = await postPayment(url, key);
    expect([executed.status, executed.replayed]).toEqual([201, false]);
    expect(replayed.replayed).toBe(true);
    expect(replayed.body!.equals(executed.body!)).toBe(true);
    expect(instance.runs.handler.get(key)).toBe(1);
  });
});

describeRedis(
  'a connection to Redis lost between a claim and its reply',
  () => {
    let gate: TcpGate;
    let target: StoreApp;
    let admin: Redis;
    let client: Redis;
    const prefix = `idempotency-lost-reply-${randomUUID().slice(0, 8)}:`;

    beforeAll(async () => {
      gate = await new TcpGate(`redis://${REDIS.host}:${REDIS.port}`).start();
      // ioredis's defaults: it sends again the commands whose reply it lost.
      client = new Redis(gate.url);
      admin = new Redis(REDIS);
      const store = new RedisIdempotencyStore(client, { prefix });
      target = await startStoreApp({
        store,
        controllers: [PaymentsController],
        providers: [Runs],
      });
    });
    afterAll(async () => {
      // Fails whatever still waits for a reply, so that the app can close.
      client?.disconnect();
      await target?.close();
      await gate?.stop();
      if (admin) {
        const keys = await keysOf(admin, prefix);
        if (keys.length > 0) {
          await admin.del(...keys);
        }
        admin.disconnect();
      }
    });

    it('the claim sent again is granted to the same attempt: its handler runs once, no 409 for its own claim', async () => {
      // Redis has the store's scripts (a NOSCRIPT reply held would keep the
      // claim from running at all).
      expect((await postPayment(target.url, randomUUID())).status).toBe(201);
      const key = randomUUID();
      const record = new RedisKeys(prefix).record(
        RedisKeys.id(DEFAULT_SCOPE, key),
      );
      gate.holdReplies();
      const request = postPayment(target.url, key);
      await until(
        async () => (await recordAt(admin, record))?.state === 'in_progress',
        'the claim to be written',
      );
      const claimed = await recordAt(admin, record);
      const owner = claimed?.state === 'in_progress' ? claimed.owner : '';
      expect(owner).toMatch(/^[0-9a-f-]{36}$/);
      // The reply never comes back: ioredis reconnects and sends it again.
      gate.cut();
      const answer = await request;
      const runs = target.app.get(Runs);
      expect({
        status: answer.status,
        replayed: answer.replayed,
        runs: runs.handler.get(key),
      }).toEqual({ status: 201, replayed: false, runs: 1 });
      // Completed by that attempt: the completion is fenced by its owner.
      expect(await recordAt(admin, record)).toMatchObject({
        state: 'finished',
        record: { status: 'completed' },
      });
      const duplicate = await postPayment(target.url, key);
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body!.equals(answer.body!)).toBe(true);
    });
  },
);

describeRedis(
  'a completion that fails while the release of its claim gets no reply',
  () => {
    let target: StoreApp;
    let client: Redis;
    const prefix = `idempotency-slow-release-${randomUUID().slice(0, 8)}:`;
    /** The key whose completion fails, and whose release waits at `held`. */
    let faulty: string | undefined;
    const held = new Barrier();
    /** Opened once that release has landed. */
    const landed = new Barrier();

    beforeAll(async () => {
      client = new Redis(REDIS);
      const store = new RedisIdempotencyStore(client, { prefix });
      // Faults at the store's seam: its completion fails as a broken
      // connection does, and the release that follows is a command its
      // client holds (ioredis's offline queue) until the test lets it go.
      const complete = store.complete.bind(store);
      store.complete = (lease, completion, transaction) =>
        lease.key === faulty
          ? Promise.reject(new Error('Connection is closed.'))
          : complete(lease, completion, transaction);
      const release = store.release.bind(store);
      store.release = async (lease) => {
        if (lease.key !== faulty) {
          return release(lease);
        }
        await held.wait();
        const write = await release(lease);
        landed.open();
        return write;
      };
      target = await startStoreApp({
        store,
        controllers: [PaymentsController],
        providers: [Runs],
      });
    });
    afterAll(async () => {
      held.open();
      await target?.close();
      if (client) {
        const keys = await keysOf(client, prefix);
        if (keys.length > 0) {
          await client.del(...keys);
        }
        client.disconnect();
      }
    });

    it('answers 503 without waiting for the release; the retry runs once it lands, reusing the step', async () => {
      const key = randomUUID();
      faulty = key;
      const runs = target.app.get(Runs);
      const answer = await postPayment(target.url, key, 120_000, 1);
      expectUnavailable(answer);
      expect(runs.handler.get(key)).toBe(1);
      const record = new RedisKeys(prefix).record(
        RedisKeys.id(DEFAULT_SCOPE, key),
      );
      // Answered while the claim is still held.
      expect(await recordAt(client, record)).toMatchObject({
        state: 'in_progress',
      });

      held.open();
      await landed.wait();
      faulty = undefined;
      const retried = await postPayment(target.url, key);
      expect({
        status: retried.status,
        replayed: retried.replayed,
        runs: runs.handler.get(key),
        charges: runs.charges.get(key),
      }).toEqual({ status: 201, replayed: false, runs: 2, charges: 1 });
    });
  },
);

/** The record at `key` on the server `admin` reaches, if any. */
async function recordAt(
  admin: Redis,
  key: string,
): Promise<RedisRecord | undefined> {
  const value = await admin.getBuffer(key);
  return value ? decodeRecord(value) : undefined;
}

const isWaitedFor = (record: RedisRecord | undefined): boolean =>
  record?.state === 'in_progress' && record.waiting;

/**
 * The lease of the killed instance: renewed every 2 s, so at least 4 s of
 * it are left at the kill, time enough for the first retries to be sent
 * within it on a busy machine (with 3 s, and 2 s left, a CI run's retries
 * on DynamoDB came after it and none was refused).
 */
const LEASE_MS = 6_000;
/** Requests inside the killed instance's handler. */
const IN_FLIGHT = 10;

/**
 * An instance (a process of the compiled library) killed with requests
 * inside its handler, each after its `charge` step: another instance takes
 * the retries, refused while the dead claims are leased, executed once they
 * have run out, reusing the step.
 */
function killedInstance(subjectOf: () => Promise<Subject>) {
  let subject: Subject;
  let survivor: StoreApp;
  let victim: SampleProcess | undefined;

  beforeAll(async () => {
    await assertBuilt();
    subject = await subjectOf();
    survivor = await startStoreApp({
      store: subject.store,
      controllers: [PaymentsController],
      providers: [Runs],
      // Longer than the lease: the lease left bounds the answer.
      idempotency: { retryAfter: 60 },
    });
  });
  afterAll(async () => {
    await victim?.stop('SIGKILL');
    await survivor?.close();
    await subject?.close();
  });

  it(`keeps its keys for what is left of a ${LEASE_MS / 1000} s lease (409, Retry-After within it), then each retry executes once, reusing the step`, async () => {
    victim = await startSample(
      { ...subject.env, LEASE: `${LEASE_MS}ms`, HOLD: '1' },
      {
        entry: '../test/stores/typeorm-free-app.js',
        ready: /listening: (http:\/\/\S+)/,
      },
    );
    const keys = Array.from({ length: IN_FLIGHT }, () => randomUUID());
    const inside = () =>
      [...victim!.output().matchAll(/^inside: (\S+)$/gm)].map(
        (match) => match[1],
      );
    const killed = keys.map((key) => postPayment(victim!.url, key, 60_000));
    while (inside().length < keys.length) {
      await once(victim.process.stdout!, 'data');
    }
    expect(inside().sort()).toEqual([...keys].sort());
    expect(await victim.stop('SIGKILL')).toEqual({
      code: null,
      signal: 'SIGKILL',
    });
    const killedAt = Date.now();
    // No client got an answer: each retries, on the other instance.
    expect((await Promise.all(killed)).map((a) => a.outcome)).toEqual(
      keys.map(() => 'transport'),
    );

    const retries = await Promise.all(
      keys.map(async (key) => {
        const { last, refusals } = await untilNotInProgress(survivor.url, key);
        return { key, last, refusals, answeredAt: Date.now() };
      }),
    );
    const firstDone = Math.min(...retries.map((r) => r.answeredAt));
    const lastDone = Math.max(...retries.map((r) => r.answeredAt));
    const { pid } = victim.process;
    const runs = survivor.app.get(Runs);
    for (const { key, last, refusals } of retries) {
      // Refused at first: the dead instance's claim was leased. Never
      // asked to wait longer than the lease had left.
      expect(refusals.length).toBeGreaterThan(0);
      for (const { sentAt, retryAfter } of refusals) {
        expect(retryAfter).toBeGreaterThanOrEqual(0);
        expect(retryAfter).toBeLessThanOrEqual(
          Math.ceil((killedAt + LEASE_MS - sentAt) / 1000),
        );
      }
      // Then executed here, once, with the step the dead instance saved.
      expect({
        key,
        status: last.status,
        replayed: last.replayed,
        charge: bodyOf(last).charge.by,
        runs: runs.handler.get(key),
        charges: runs.charges.get(key),
      }).toEqual({
        key,
        status: 201,
        replayed: false,
        charge: `pid ${pid}`,
        runs: 1,
        charges: undefined,
      });
      expect(JSON.parse(last.body!.toString())).toMatchObject(paymentFor(key));
      const duplicate = await postPayment(survivor.url, key);
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body!.equals(last.body!)).toBe(true);
    }
    // Refused only within the lease: its last renewal came before the kill,
    // so it ended by `killedAt + LEASE_MS`, and a retry sent after that
    // executes (on a busy machine retries go later, never earlier).
    const leaseEnd = killedAt + LEASE_MS;
    expect(
      retries.flatMap(({ key, refusals }) =>
        refusals
          .filter(({ sentAt }) => sentAt >= leaseEnd)
          .map(({ sentAt }) => ({ key, sentAfterLeaseMs: sentAt - leaseEnd })),
      ),
    ).toEqual([]);
    expect(await subject.records()).toBe(IN_FLIGHT);
    const afters = retries.flatMap((r) => r.refusals.map((x) => x.retryAfter));
    report(
      `${subject.env!.STORE} instance killed (SIGKILL) with ${IN_FLIGHT} requests inside the handler, lease ${LEASE_MS} ms: ` +
        `retries on another instance ${afters.length} × 409 (Retry-After ${[...new Set(afters)].sort().join('/')} s), ` +
        `first 201 ${firstDone - killedAt} ms after the kill, last ${lastDone - killedAt} ms; ` +
        `${Runs.total(runs.handler)} handler runs, ${Runs.total(runs.charges)} charges (${IN_FLIGHT} steps reused)`,
    );
  });
}

describe('an instance killed with requests inside the handler', () => {
  describeRedis('on Redis', () => killedInstance(redisSubject));
  describe('on DynamoDB', () => killedInstance(dynamoSubject));
});
