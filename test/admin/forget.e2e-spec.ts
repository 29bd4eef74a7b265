import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  IdempotencyAdmin,
  IdempotencyStore,
  MemoryIdempotencyStore,
} from '../../src/index.js';
import type {
  ClaimRequest,
  ForgottenBatch,
} from '../../src/interfaces/idempotency-store.interface.js';
import {
  BatchWriteItemCommand,
  type AttributeValue,
} from '@aws-sdk/client-dynamodb';
import { DynamoDbIdempotencyStore } from '../../src/stores/dynamodb/index.js';
import {
  num,
  partitionKey,
  str,
} from '../../src/stores/dynamodb/dynamodb-item.js';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import { RedisKeys } from '../../src/stores/redis/redis-keys.js';
import { inProgressValue } from '../../src/stores/redis/redis-record.js';
import { stepValue } from '../../src/stores/redis/redis-step-value.js';
import { startDynalite } from '../utils/dynalite.js';
import { describeWithServer } from '../utils/server.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

const RECORDS = 10_000;
const BATCH = 1_000;
const HOUR_MS = 3_600_000;

const describeRedis = await describeWithServer('Redis', '127.0.0.1', 6379);

/**
 * `store`, whose forget claims and completes a new key of the scope `kept`
 * between two batches, which must be granted at once; `probes()`: how many.
 */
function probedBetweenBatches(
  store: IdempotencyStore,
  batches: ForgottenBatch[],
): { checked: IdempotencyStore; probes: () => number } {
  let probes = 0;
  const checked = checkedBetweenBatches(store, batches, async () => {
    const probe = attempt('kept', `probe-${(probes += 1)}`);
    expect(await store.claim(probe)).toMatchObject({ state: 'claimed' });
    await store.complete(
      probe,
      { status: 'completed', response: { status: 204 }, ttlMs: HOUR_MS },
      undefined,
    );
  });
  return { checked, probes: () => probes };
}

/** A claim of `key` in `scope` by a new attempt. */
const attempt = (scope: string, key: string): ClaimRequest => ({
  scope,
  key,
  owner: randomUUID(),
  fingerprint: 'fp',
  method: 'POST',
  path: '/p',
  leaseMs: 60_000,
  ttlMs: HOUR_MS,
  wait: false,
});

/**
 * `store`, whose `forgetRecords` runs `between` after each batch, before
 * the next one begins, and keeps each batch.
 */
function checkedBetweenBatches(
  store: IdempotencyStore,
  batches: ForgottenBatch[],
  between: (scope: string) => Promise<void>,
): IdempotencyStore {
  return new Proxy(store, {
    get(subject, property) {
      if (property !== 'forgetRecords') {
        return Reflect.get(subject, property, subject) as unknown;
      }
      return async (...args: [string, string | undefined, number]) => {
        const batch = await subject.forgetRecords!(...args);
        batches.push(batch);
        await between(args[0]);
        return batch;
      };
    },
  });
}

/**
 * `forget` of a scope of 10,000 records: all of them and their steps gone,
 * another scope untouched, and no lock held past a batch (between two
 * batches, another session locks every row left of the scope without
 * waiting: `FOR UPDATE NOWAIT`).
 */
describe('IdempotencyAdmin.forget of a scope of 10,000 records', () => {
  it('on PostgreSQL: deletes them in batches that each commit, holding no row between two', async () => {
    const target: TestApp = await startTestApp({ idempotency: { gc: false } });
    const other = new pg.Client({ connectionString: target.db.url });
    await other.connect();
    try {
      const scope = `forget-${randomUUID()}`;
      await target.db.query(
        `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status, expires_at)
         SELECT s, 'k' || i, 'fp', 'POST', '/p', 'completed', now() + interval '1 hour'
         FROM generate_series(1, $1::int) AS i, unnest(ARRAY[$2, 'kept']) AS s`,
        [RECORDS, scope],
      );
      await target.db.query(
        `INSERT INTO idempotency_steps (scope, key, step, result, expires_at)
         SELECT $2, 'k' || i, 'charge', '1', now() + interval '1 hour'
         FROM generate_series(1, $1::int) AS i`,
        [RECORDS, scope],
      );
      const store = target.app.get<IdempotencyStore>(IdempotencyStore);
      const batches: ForgottenBatch[] = [];
      const checked = checkedBetweenBatches(store, batches, async (left) => {
        // Every row left of the scope is free: nothing waits on the forget.
        await other.query(
          `SELECT count(*) FROM (SELECT 1 FROM idempotency_records WHERE scope = $1
             FOR UPDATE NOWAIT) AS r`,
          [left],
        );
      });
      const forgotten = await new IdempotencyAdmin(checked).forget(scope, {
        batchSize: BATCH,
      });
      expect(forgotten).toEqual({ records: RECORDS, steps: RECORDS });
      expect(batches.length).toBeGreaterThanOrEqual((2 * RECORDS) / BATCH);
      expect(
        Math.max(...batches.map((b) => b.records + b.steps)),
      ).toBeLessThanOrEqual(BATCH);
      expect(
        await target.db.query(
          `SELECT scope, count(*)::int AS n FROM idempotency_records GROUP BY scope
           UNION ALL SELECT 'steps', count(*)::int FROM idempotency_steps`,
        ),
      ).toEqual([
        { scope: 'kept', n: RECORDS },
        { scope: 'steps', n: 0 },
      ]);
    } finally {
      await other.end();
      await target.close();
    }
  });

  it('on the memory store: all gone, another scope kept', async () => {
    const store = new MemoryIdempotencyStore();
    for (const scope of ['forgotten', 'kept']) {
      for (let i = 0; i < RECORDS; i += 1) {
        await store.claim({
          scope,
          key: `k${i}`,
          owner: randomUUID(),
          fingerprint: 'fp',
          method: 'POST',
          path: '/p',
          leaseMs: 60_000,
          ttlMs: 3_600_000,
          wait: false,
        });
      }
    }
    let batches = 0;
    const forgotten = await new IdempotencyAdmin(store).forget('forgotten', {
      batchSize: BATCH,
      onBatch: () => (batches += 1),
    });
    expect(forgotten).toEqual({ records: RECORDS, steps: 0 });
    expect(batches).toBeGreaterThanOrEqual(RECORDS / BATCH);
    expect(store.size).toBe(RECORDS);
  });

  describeRedis('on Redis', () => {
    it('deletes them in batches of one script per key, other scopes claiming and completing between two', async () => {
      const client = new Redis({ host: '127.0.0.1', port: 6379 });
      const store = new RedisIdempotencyStore(client, {
        prefix: `idempotency-test-forget-${randomUUID().slice(0, 8)}:`,
      });
      const admin = new IdempotencyAdmin(store);
      const scope = `forget-${randomUUID()}`;
      try {
        // Written as the store writes a claim and its step, 2,000 keys a
        // pipeline: a claim and a step each would take the test seconds.
        const keys = new RedisKeys(store.options.prefix);
        for (let from = 0; from < RECORDS; from += 2_000) {
          const pipeline = client.pipeline();
          for (let i = from; i < from + 2_000; i += 1) {
            for (const of of [scope, 'kept']) {
              const claim = attempt(of, `k${i}`);
              const id = RedisKeys.id(of, claim.key);
              pipeline.set(
                keys.record(id),
                inProgressValue(claim.owner, claim, Date.now()),
                'PX',
                claim.leaseMs,
              );
              pipeline.set(keys.generation(id), claim.owner, 'PX', HOUR_MS);
              if (of === scope) {
                pipeline.hset(keys.steps(id), {
                  's:charge': stepValue(Date.now() + HOUR_MS, 'fp', i),
                  id: RedisKeys.identity(of, claim.key),
                });
              }
            }
          }
          await pipeline.exec();
        }
        const batches: ForgottenBatch[] = [];
        // Redis holds nothing between two batches.
        const { checked, probes } = probedBetweenBatches(store, batches);
        const forgotten = await new IdempotencyAdmin(checked).forget(scope, {
          batchSize: BATCH,
        });
        expect(forgotten).toEqual({ records: RECORDS, steps: RECORDS });
        expect(batches.length).toBeGreaterThanOrEqual((2 * RECORDS) / BATCH);
        expect(
          Math.max(...batches.map((b) => b.records + b.steps)),
        ).toBeLessThanOrEqual(BATCH);
        expect(await admin.inspect('k0', 'kept')).toMatchObject({
          status: 'in_progress',
        });
        expect(
          await store.claim(attempt(scope, `k${RECORDS - 1}`)),
        ).toMatchObject({ state: 'claimed' });
        expect(await admin.forget('kept', { batchSize: 10_000 })).toEqual({
          records: RECORDS + probes(),
          steps: 0,
        });
      } finally {
        await store.close();
        await client.quit();
      }
    });
  });

  // On dynalite (DynamoDB in this process), every write costs as a request
  // does: the scope kept beside the 10,000 records forgotten has 1,000.
  it('on DynamoDB: deletes them in batches of BatchWriteItem deletions, other scopes claiming and completing between two', async () => {
    const records = RECORDS;
    const kept = 1_000;
    const batchSize = BATCH;
    const dynamo = await startDynalite();
    const client = dynamo.client();
    await DynamoDbIdempotencyStore.createTable(client, { timeToLive: false });
    const store = new DynamoDbIdempotencyStore(client);
    const scope = `forget-${randomUUID()}`;
    try {
      // Written as the store writes a claim and its step, 25 items a
      // request (BatchWriteItem's most), 40 requests at a time.
      const now = Date.now();
      const items: Array<Record<string, AttributeValue>> = [
        scope,
        'kept',
      ].flatMap((of) =>
        Array.from({ length: of === scope ? records : kept }, (_, i) => ({
          pk: str(partitionKey(of, `k${i}`)),
          scope: str(of),
          key: str(`k${i}`),
          fingerprint: str('fp'),
          method: str('POST'),
          path: str('/p'),
          status: str('in_progress'),
          owner: str(randomUUID()),
          lease_expires_at: num(now + 60_000),
          claimed_at: num(now),
          expires_at: num(now + HOUR_MS),
          generation: str(randomUUID()),
          steps: {
            M: (of === scope
              ? {
                  charge: {
                    M: {
                      r: str(String(i)),
                      e: num(now + HOUR_MS),
                      f: str('fp'),
                    },
                  },
                }
              : {}) as Record<string, AttributeValue>,
          },
        })),
      );
      for (let from = 0; from < items.length; from += 1_000) {
        await Promise.all(
          Array.from({ length: 40 }, (_, j) => {
            const chunk = items.slice(from + j * 25, from + (j + 1) * 25);
            return client.send(
              new BatchWriteItemCommand({
                RequestItems: {
                  idempotency_records: chunk.map((Item) => ({
                    PutRequest: { Item },
                  })),
                },
              }),
            );
          }),
        );
      }
      const batches: ForgottenBatch[] = [];
      // DynamoDB holds nothing between two batches.
      const { checked, probes } = probedBetweenBatches(store, batches);
      const forgotten = await new IdempotencyAdmin(checked).forget(scope, {
        batchSize,
      });
      expect(forgotten).toEqual({ records, steps: records });
      expect(batches.length).toBeGreaterThanOrEqual((2 * records) / batchSize);
      expect(
        Math.max(...batches.map((b) => b.records + b.steps)),
      ).toBeLessThanOrEqual(batchSize);
      const admin = new IdempotencyAdmin(store);
      expect(await admin.inspect('k0', 'kept')).toMatchObject({
        status: 'in_progress',
      });
      expect(
        await store.claim(attempt(scope, `k${records - 1}`)),
      ).toMatchObject({ state: 'claimed' });
      expect(
        (await admin.list({ scope: 'kept', status: 'completed', limit: 1000 }))
          .records,
      ).toHaveLength(probes());
    } finally {
      await dynamo.close();
    }
  });
});
