import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  IdempotencyAdmin,
  IdempotencyStore,
  MemoryIdempotencyStore,
} from '../../src/index.js';
import type { ForgottenBatch } from '../../src/interfaces/idempotency-store.interface.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

const RECORDS = 10_000;
const BATCH = 1_000;

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
      const checked = new Proxy(store, {
        get(subject, property) {
          if (property !== 'forgetRecords') {
            return Reflect.get(subject, property, subject) as unknown;
          }
          return async (...args: [string, string | undefined, number]) => {
            const batch = await subject.forgetRecords!(...args);
            batches.push(batch);
            // Every row left of the scope is free: nothing waits on the forget.
            await other.query(
              `SELECT count(*) FROM (SELECT 1 FROM idempotency_records WHERE scope = $1
                 FOR UPDATE NOWAIT) AS r`,
              [args[0]],
            );
            return batch;
          };
        },
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
});
