/**
 * The Redis store lists records with SCAN, a page at a time. Redis resizes
 * its table as keys come and go, and a SCAN taken again from within a
 * chunk after a resize covers other keys: a page must go on from where
 * SCAN said, never from inside a chunk. Here the keyspace grows tenfold
 * between two pages (keys of other applications), and every record is
 * still listed exactly once.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/stores/redis/index.js';
import type { ClaimRequest } from '../../src/interfaces/idempotency-store.interface.js';
import { describeWithServer } from '../utils/server.js';
import { keysOf } from '../utils/redis-server.js';

const REDIS = { host: '127.0.0.1', port: 6379 };
/** A database no other suite writes to: its table is this test's. */
const DB = 13;
const RECORDS = 1_500;
const OTHERS = 40_000;

const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

describeRedis('listing records on Redis while its table is resized', () => {
  const prefix = `idempotency-test-list-${randomUUID().slice(0, 8)}:`;
  const others = `idempotency-test-other-${randomUUID().slice(0, 8)}:`;
  let client: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    client = new Redis({ ...REDIS, db: DB });
    store = new RedisIdempotencyStore(client, { prefix });
    for (let first = 0; first < RECORDS; first += 250) {
      await Promise.all(
        Array.from({ length: Math.min(250, RECORDS - first) }, (_, i) => {
          const request: ClaimRequest = {
            scope: 'listed',
            key: `k${first + i}`,
            owner: randomUUID(),
            fingerprint: 'f',
            method: 'POST',
            path: '/orders',
            leaseMs: 600_000,
            ttlMs: 600_000,
            wait: false,
          };
          return store.claim(request);
        }),
      );
    }
  });
  afterAll(async () => {
    for (const of of [prefix, others]) {
      const keys = await keysOf(client, of);
      for (let at = 0; at < keys.length; at += 1_000) {
        await client.unlink(...keys.slice(at, at + 1_000));
      }
    }
    await store.close();
    await client.quit();
  });

  it('lists each record once though the keyspace grew tenfold after the first page', async () => {
    const listed: string[] = [];
    let page = await store.listRecords({
      statuses: ['in_progress'],
      scope: 'listed',
      limit: 100,
    });
    listed.push(...page.records.map((record) => record.key));
    // Other applications' keys: Redis grows its table, and rehashes it.
    for (let at = 0; at < OTHERS; at += 5_000) {
      const batch = client.pipeline();
      for (let i = at; i < at + 5_000; i += 1) {
        batch.set(`${others}${i}`, '1');
      }
      await batch.exec();
    }
    while (page.cursor !== undefined) {
      page = await store.listRecords({
        statuses: ['in_progress'],
        scope: 'listed',
        limit: 100,
        cursor: page.cursor,
      });
      listed.push(...page.records.map((record) => record.key));
    }
    const twice = listed.filter((key, i) => listed.indexOf(key) !== i);
    expect({ listed: new Set(listed).size, twice }).toEqual({
      listed: RECORDS,
      twice: [],
    });
  });
});
