import { randomUUID } from 'node:crypto';
import {
  IdempotencyConfigurationError,
  IdempotencyNotReplayableException,
  IdempotencyService,
  type IdempotencyStore,
} from '../../src/index.js';
import { DEFAULT_SCOPE, type ClaimOutcome } from '../../src/stores/index.js';
import { Barrier, until } from '../utils/barrier.js';
import { DERIVED_KEY } from '../utils/derived-keys.js';
import { describeWithValkeyServer } from '../utils/redis-server.js';
import { describeWithServer } from '../utils/server.js';
import {
  dynamoSubject,
  memorySubject,
  REDIS,
  redisSubject,
  type Subject,
  valkeySubject,
} from '../utils/store-subjects.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import { PLATFORMS, type Platform } from '../utils/test-app.js';
import { Effects, MemoryStoreController } from './http.module.js';

/** Tells the test about every claim `store` answers. */
function observed(store: IdempotencyStore) {
  const observer = { onClaim: (_outcome: ClaimOutcome) => undefined as void };
  const claim = store.claim.bind(store);
  store.claim = async (request) => {
    const outcome = await claim(request);
    observer.onClaim(outcome);
    return outcome;
  };
  return observer;
}

/**
 * What the module promises over HTTP on a store other than PostgreSQL, in an
 * application without TypeORM: the same answers, with the store's record
 * completed after the handler instead of in its transaction.
 */
function moduleOnStore(platform: Platform, subjectOf: () => Promise<Subject>) {
  let target: StoreApp;
  let subject: Subject;
  let store: IdempotencyStore;
  let observer: ReturnType<typeof observed>;
  let effects: Effects;

  beforeAll(async () => {
    subject = await subjectOf();
    store = subject.store;
    observer = observed(store);
    target = await startStoreApp({
      store,
      platform,
      controllers: [MemoryStoreController],
      providers: [Effects],
    });
    effects = target.app.get(Effects);
  });
  afterAll(async () => {
    await target?.close();
    await subject?.close();
  });
  beforeEach(() => {
    effects.orders = 0;
    effects.charges = 0;
    effects.failures = 0;
    effects.barrier = undefined;
    effects.committed.length = 0;
    effects.stepEffects.length = 0;
    observer.onClaim = () => undefined;
    effects.probe = () => Promise.resolve('-');
  });

  const post = (path: string, key: string | undefined, body: unknown) =>
    fetch(`${target.url}${path}`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        ...(key === undefined ? {} : { 'Idempotency-Key': key }),
      },
      body: JSON.stringify(body),
    });

  it('executes a request once and replays its duplicate byte for byte; afterCommit runs after the completion', async () => {
    const key = randomUUID();
    const committed = effects.expectAfterCommit();
    // The record as another attempt finds it when afterCommit runs.
    effects.probe = async (scope, probed) =>
      (
        await store.claim({
          scope,
          key: probed,
          owner: randomUUID(),
          fingerprint: '-',
          method: 'POST',
          path: '/probe',
          leaseMs: 1_000,
          ttlMs: 1_000,
          wait: false,
        })
      ).state;
    const first = await post('/orders', key, { reference: 'r-1' });
    const firstBody = Buffer.from(await first.arrayBuffer());
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    await committed;
    expect(effects.committed).toEqual([`${DEFAULT_SCOPE}:r-1:finished`]);

    const second = await post('/orders', key, { reference: 'r-1' });
    const secondBody = Buffer.from(await second.arrayBuffer());
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('x-order-source')).toBe('memory');
    expect(second.headers.get('content-type')).toBe(
      first.headers.get('content-type'),
    );
    expect(secondBody.equals(firstBody)).toBe(true);
    expect(JSON.parse(secondBody.toString())).toEqual({
      order: 1,
      reference: 'r-1',
      note: 'é\u2028<>',
    });
    expect(effects.orders).toBe(1);
    expect(effects.committed).toEqual([`${DEFAULT_SCOPE}:r-1:finished`]);
  });

  it('answers a concurrent duplicate 409 while the first runs, then replays', async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const first = post('/orders', key, { reference: 'r-2' });
    await effects.barrier.reached(1);
    const duplicate = await post('/orders', key, { reference: 'r-2' });
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers.get('retry-after')).not.toBeNull();
    effects.barrier.open();
    expect((await first).status).toBe(201);
    expect(effects.orders).toBe(1);
    const replay = await post('/orders', key, { reference: 'r-2' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('wakes a waiting duplicate in process when the first completes', async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const first = post('/waited', key, { reference: 'w-1' });
    await effects.barrier.reached(1);
    const waiting = new Promise<void>((resolve) => {
      observer.onClaim = (outcome) => {
        if (outcome.state === 'in_progress') {
          resolve();
        }
      };
    });
    const duplicate = post('/waited', key, { reference: 'w-1' });
    await waiting;
    effects.barrier.open();
    const [a, b] = await Promise.all([first, duplicate]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    expect(await b.json()).toEqual({ reference: 'w-1', order: 1 });
    expect(effects.orders).toBe(1);
  });

  it('answers 422 to the same key with another payload, without running the handler', async () => {
    const key = randomUUID();
    expect((await post('/orders', key, { reference: 'a' })).status).toBe(201);
    const other = await post('/orders', key, { reference: 'b' });
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toContain(
      'application/problem+json',
    );
    expect(effects.orders).toBe(1);
  });

  it('sends a response too large to keep, then answers its duplicates with its status and no body, without running the handler', async () => {
    const key = randomUUID();
    // Over the module's maxResponseSize (1 MiB), and over every store's own limit.
    const size = 9 * 1024 * 1024;
    const first = await post('/report', key, { size });
    expect(first.status).toBe(200);
    expect((await first.text()).length).toBe(size);
    const duplicate = await post('/report', key, { size });
    expect(duplicate.status).toBe(200);
    expect(duplicate.headers.get('idempotent-replayed')).toBe('true');
    expect(duplicate.headers.get('idempotent-body-omitted')).toBe('true');
    expect(await duplicate.text()).toBe('');
    expect(effects.orders).toBe(1);
  });

  it('answers 400 to a request without a key, without running the handler or writing a record', async () => {
    const size = await subject.records();
    const response = await post('/orders', undefined, { reference: 'x' });
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toContain(
      'application/problem+json',
    );
    expect(effects.orders).toBe(0);
    expect(await subject.records()).toBe(size);
  });

  it('frees the key of a handler that failed: the retry runs, and only its afterCommit runs', async () => {
    const key = randomUUID();
    const failed = await post('/flaky', key, { reference: 'f' });
    expect(failed.status).toBe(500);
    const retry = await post('/flaky', key, { reference: 'f' });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ attempt: 2 });
    const replay = await post('/flaky', key, { reference: 'f' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(effects.failures).toBe(2);
    // The afterCommit of the failed attempt never runs; the retry's does.
    await new Promise((resolve) => setImmediate(resolve));
    expect(effects.committed).toEqual(['flaky:f']);
  });

  it('resumes after the last completed step: a retry does not charge again, and derives the same key', async () => {
    const key = randomUUID();
    const failed = await post('/steps', key, { fail: true });
    expect(failed.status).toBe(500);
    const retry = await post('/steps', key, { fail: true });
    expect(retry.status).toBe(201);
    const body = (await retry.json()) as { key: string };
    expect(body.key).toMatch(DERIVED_KEY);
    // The charge the failed attempt stored carries the key the retry derives.
    expect(body).toEqual({
      charge: { id: 'ch_1', key: body.key },
      key: body.key,
    });
    expect(effects.charges).toBe(1);

    // Another request key derives another key.
    const other = await post('/steps', randomUUID(), { fail: false });
    expect(other.status).toBe(201);
    const otherBody = (await other.json()) as { key: string };
    expect(otherBody).toEqual({
      charge: { id: 'ch_2', key: otherBody.key },
      key: otherBody.key,
    });
    expect(otherBody.key).toMatch(DERIVED_KEY);
    expect(otherBody.key).not.toBe(body.key);
  });

  it("refuses the handler's transaction with a clear configuration error: there is none", async () => {
    const response = await post('/transactions', randomUUID(), {});
    expect(response.status).toBe(200);
    const { refusals, active } = (await response.json()) as {
      refusals: string[];
      active: boolean;
    };
    expect(active).toBe(true);
    expect(refusals).toEqual([
      'manager: true IdempotencyContext.manager needs the PostgreSQL store: the idempotency store of this application completes outside of any database transaction.',
      'newTransaction: true',
    ]);
  });

  it('abandons a hung handler at its deadline: 503, the key free at once, and its late return stores nothing', async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const hung = await post('/hung', key, { reference: 'h' });
    expect(hung.status).toBe(503);
    expect(hung.headers.get('content-type')).toContain(
      'application/problem+json',
    );
    expect(hung.headers.get('retry-after')).not.toBeNull();
    // Still running: the retry is not refused, it runs at once.
    expect(effects.committed).toEqual([]);
    const retry = await post('/hung', key, { reference: 'h' });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ reference: 'h', run: 2 });
    // The abandoned handler returns now, after the retry completed: the
    // fence keeps its result out of the record.
    effects.barrier.open();
    await until(
      () => Promise.resolve(effects.committed.includes('hung:1:returned')),
      'the abandoned handler to return',
    );
    const replay = await post('/hung', key, { reference: 'h' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({ reference: 'h', run: 2 });
    expect(effects.orders).toBe(2);
  });

  it("runs no later step of a handler abandoned at its deadline: its retry's is the only effect", async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const hung = await post('/hung-steps', key, {});
    expect(hung.status).toBe(503);
    // The retry resumes after the step the abandoned attempt saved.
    const retry = await post('/hung-steps', key, {});
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({
      reserve: 'reserve-1',
      charge: 'charge-2',
      run: 2,
    });
    // The abandoned handler goes on to its second step now: refused.
    effects.barrier.open();
    await until(
      () =>
        Promise.resolve(
          effects.committed.some((line) => line.startsWith('hung-steps:1:')),
        ),
      'the abandoned handler to reach its second step',
    );
    expect(effects.committed).toEqual([
      'hung-steps:2:charged',
      'hung-steps:1:IdempotencyUnavailableException',
    ]);
    expect(effects.stepEffects).toEqual(['reserve:1', 'charge:2']);
    const replay = await post('/hung-steps', key, {});
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({
      reserve: 'reserve-1',
      charge: 'charge-2',
      run: 2,
    });
  });

  it('keeps a step for the retry of its attempt when the ttl is shorter than the handler: the effect runs once', async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const first = post('/short-steps', key, { hold: 'after' });
    await until(
      () => Promise.resolve(effects.stepEffects.length === 1),
      'the first run to charge',
    );
    // The subject is the ttl (1 s) running out while the attempt lives.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    effects.barrier.open();
    expect([500, 503]).toContain((await first).status);
    const retry = await post('/short-steps', key, { hold: 'after' });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ charge: 'charge-1', run: 2 });
    expect(effects.stepEffects).toHaveLength(1);
  });

  it("keeps a key bound past its attempt's deadline when the ttl is shorter: the retry derives the same downstream key", async () => {
    const key = randomUUID();
    effects.barrier = new Barrier();
    const abandoned = await post('/short-steps', key, { hold: 'in' });
    expect(abandoned.status).toBe(503);
    const retry = await post('/short-steps', key, { hold: 'in' });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ charge: 'charge-2', run: 2 });
    effects.barrier.open();
    const [first, second] = effects.stepEffects.map((line) =>
      line.replace(/^charge:\d+:/, ''),
    );
    expect(effects.stepEffects).toHaveLength(2);
    expect(second).toBe(first);
  });

  it('runs IdempotencyService.run() once per key, and refuses its manager', async () => {
    const service = target.app.get(IdempotencyService);
    const key = randomUUID();
    let runs = 0;
    const work = () => {
      runs += 1;
      return { runs };
    };
    expect(await service.run({ key }, work)).toEqual({ runs: 1 });
    expect(await service.run({ key }, work)).toEqual({ runs: 1 });
    expect(runs).toBe(1);
    await expect(
      service.run({ key: randomUUID() }, (manager) => manager.find('x')),
    ).rejects.toThrow(IdempotencyConfigurationError);
    // That run failed: its key is free again.
    const failedKey = randomUUID();
    await expect(
      service.run({ key: failedKey }, (manager) => manager.query('x')),
    ).rejects.toThrow(/needs the PostgreSQL store/);
    expect(await service.run({ key: failedKey }, work)).toEqual({ runs: 2 });
  });

  it('runs the work of IdempotencyService.run() once when its result is not JSON: the caller gets the error, its duplicates are refused as not replayable (the effect stays, outside of any transaction)', async () => {
    const service = target.app.get(IdempotencyService);
    const key = randomUUID();
    let runs = 0;
    const work = () => {
      runs += 1;
      return { total: 1n };
    };
    await expect(service.run({ key }, work)).rejects.toThrow(TypeError);
    await expect(service.run({ key }, work)).rejects.toBeInstanceOf(
      IdempotencyNotReplayableException,
    );
    expect(runs).toBe(1);
  });

  describe('with a 1 s lease', () => {
    let short: StoreApp;
    let shortEffects: Effects;
    /** Called with the owners each renewal of the store kept. */
    let onRenewed: (owners: ReadonlySet<string>) => void = () => undefined;

    beforeAll(async () => {
      const renew = store.renew.bind(store);
      store.renew = async (leases) => {
        const kept = await renew(leases);
        onRenewed(kept);
        return kept;
      };
      short = await startStoreApp({
        store,
        platform,
        idempotency: { lease: '1s' },
        controllers: [MemoryStoreController],
        providers: [Effects],
      });
      shortEffects = short.app.get(Effects);
    });
    afterAll(() => short?.close());

    /** Resolves once renewals kept a claim four times (lease / 3 apart). */
    const renewedFourTimes = () => {
      let renewals = 0;
      return new Promise<void>((resolve) => {
        onRenewed = (owners) => {
          if (owners.size > 0 && ++renewals === 4) {
            resolve();
          }
        };
      });
    };

    it('keeps the claim of a handler that runs past its lease by renewing it: a duplicate is still refused', async () => {
      const key = randomUUID();
      // Four renewals, one every lease / 3: past the lease the claim started with.
      const renewedPastTheLease = renewedFourTimes();
      shortEffects.barrier = new Barrier();
      const first = fetch(`${short.url}/orders`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ reference: 'long' }),
      });
      await shortEffects.barrier.reached(1);
      await renewedPastTheLease;
      const duplicate = await post('/orders', key, { reference: 'long' });
      expect(duplicate.status).toBe(409);
      shortEffects.barrier.open();
      expect((await first).status).toBe(201);
      expect(shortEffects.orders + effects.orders).toBe(1);
      onRenewed = () => undefined;
    });

    it("binds a step run late in a long attempt to the attempt's generation: its retry derives the same downstream key", async () => {
      const key = randomUUID();
      // Past its lease (1 s) and its ttl (500 ms), which the key's
      // generation was first kept for.
      const renewedPastTheLease = renewedFourTimes();
      shortEffects.orders = 0;
      shortEffects.stepEffects.length = 0;
      shortEffects.barrier = new Barrier();
      shortEffects.stepBarrier = new Barrier();
      const first = fetch(`${short.url}/late-step`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: '{}',
      });
      await shortEffects.barrier.reached(1);
      await renewedPastTheLease;
      onRenewed = () => undefined;
      shortEffects.barrier.open();
      expect((await first).status).toBe(503);
      const retry = await fetch(`${short.url}/late-step`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: '{}',
      });
      expect(retry.status).toBe(201);
      shortEffects.stepBarrier.open();
      expect(shortEffects.stepEffects).toHaveLength(2);
      expect(shortEffects.stepEffects[1]).toBe(shortEffects.stepEffects[0]);
    });
  });
}

describe.each(PLATFORMS)(
  'the module on the in-memory store, without TypeORM (%s)',
  (platform) => moduleOnStore(platform, memorySubject),
);

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRedis.each(PLATFORMS)(
  'the module on the Redis store, without TypeORM (%s)',
  (platform) => moduleOnStore(platform, redisSubject),
);

describeWithValkeyServer().each(PLATFORMS)(
  'the module on the Redis store on Valkey, without TypeORM (%s)',
  (platform) => moduleOnStore(platform, valkeySubject),
);

describe.each(PLATFORMS)(
  'the module on the DynamoDB store, without TypeORM (%s)',
  (platform) => moduleOnStore(platform, dynamoSubject),
);
