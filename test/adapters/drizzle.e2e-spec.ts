/**
 * The Drizzle adapter beyond the payments suite, over HTTP on Express and
 * Fastify: the handler's transaction begun by its first statement (none
 * held before), `tx.transaction()` a savepoint of it, transactions of
 * their own committing apart from it, a serialization failure of a
 * Drizzle statement answered 503, and a Drizzle database built on the
 * module's connection (with the pg adapter) whose own transaction ends the
 * handler's underneath it.
 */
import { Module } from '@nestjs/common';
import { drizzle } from 'drizzle-orm/node-postgres';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { DrizzleIdempotencyAdapter } from '../../src/drizzle/index.js';
import { answer, UNAVAILABLE_ANSWER } from '../utils/problems.js';
import { idleInTransaction } from '../utils/sessions.js';
import { PLATFORMS } from '../utils/test-app.js';
import { Barrier } from '../utils/barrier.js';
import type { AdapterFixture } from './adapter-fixture.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import { reader, withModules } from './drizzle-app.js';
import { drizzleFixture } from './drizzle.fixture.js';
import {
  DrizzleBarriers,
  DrizzleHandlersModule,
  DrizzleOnPgModule,
} from './drizzle-handlers.js';
import { DRIZZLE, type PaymentsDb } from './drizzle.schema.js';
import { pgFixture } from './pg.fixture.js';

describe.each(PLATFORMS)('the Drizzle adapter (%s)', (platform) => {
  let target: AdapterApp;
  let barriers: DrizzleBarriers;
  let db: PaymentsDb;
  const { post, payments, ledger, record } = reader(() => target);

  beforeAll(async () => {
    target = await startAdapterApp(
      withModules(drizzleFixture, DrizzleHandlersModule),
      // Renewals, which take a pooled connection for a moment, stay out of
      // the counts of the pool.
      { platform, idempotency: { lease: '60s' } },
    );
    barriers = target.app.get(DrizzleBarriers);
    db = target.app.get(DRIZZLE);
  });
  afterAll(() => target?.close());

  const checkedOut = () => db.$client.totalCount - db.$client.idleCount;

  it('holds no connection while the handler waits before its first statement, which begins the transaction', async () => {
    barriers.beforeFirst = new Barrier();
    barriers.afterFirst = new Barrier();
    const key = randomUUID();
    const response = post('/drizzle/parked', key, { key });

    await barriers.beforeFirst.reached();
    expect(checkedOut()).toBe(0);
    expect(await idleInTransaction(target.db)).toEqual([]);

    barriers.beforeFirst.open();
    await barriers.afterFirst.reached();
    expect(checkedOut()).toBe(1);
    expect(await idleInTransaction(target.db)).toHaveLength(1);

    barriers.afterFirst.open();
    expect((await response).status).toBe(201);
    expect(checkedOut()).toBe(0);
    expect(await payments(key)).toEqual([key]);
    expect((await record(key)).status).toBe('completed');
  });

  it("makes tx.transaction() a savepoint of the handler's transaction: its rollback keeps the outer writes, which commit with the record", async () => {
    const key = randomUUID();
    const response = await post('/drizzle/savepoints', key, { key });
    expect(response.status).toBe(201);
    const body = (await response.json()) as {
      declined: string;
      savepoint: string;
      handler: string;
    };
    expect(body.declined).toBe('rolled back');
    // Inside the savepoint, txid_current() is the handler's transaction's.
    expect(body.savepoint).toBe(body.handler);
    expect(await payments(key)).toEqual([key]);
    expect(await ledger(key)).toEqual([10]);
    expect((await record(key)).status).toBe('completed');
  });

  it('fails the request when the handler calls tx.rollback(): nothing is stored, and the key is free', async () => {
    const key = randomUUID();
    const response = await post('/drizzle/rollback', key, { key });
    expect(response.status).toBe(500);
    expect(await payments(key)).toEqual([]);
    expect(await record(key)).toBeUndefined();
  });

  it('commits IdempotencyContext.newTransaction() and db.transaction() on their own, whatever becomes of the handler', async () => {
    const failedKey = randomUUID();
    const failed = await post('/drizzle/own', failedKey, {
      key: failedKey,
      fail: true,
    });
    expect(failed.status).toBe(400);
    expect(await payments(failedKey)).toEqual([
      `${failedKey}/context`,
      `${failedKey}/db`,
    ]);
    expect(await record(failedKey)).toBeUndefined();

    const key = randomUUID();
    const done = await post('/drizzle/own', key, { key });
    expect(done.status).toBe(201);
    const body = (await done.json()) as {
      handler: string;
      context: { txid: string; level: string };
      db: string;
    };
    expect(body.context.level).toBe('serializable');
    expect(new Set([body.handler, body.context.txid, body.db]).size).toBe(3);
    expect(await payments(key)).toEqual([
      `${key}/handler`,
      `${key}/context`,
      `${key}/db`,
    ]);
    expect((await record(key)).status).toBe('completed');
  });

  it('answers a serialization failure of a Drizzle statement with 503, writes nothing, and the retry runs', async () => {
    const [first, second] = [randomUUID(), randomUUID()];
    const firstAnswer = answer(post('/drizzle/skew', first, { key: first }));
    const secondAnswer = answer(post('/drizzle/skew', second, { key: second }));
    // Both have read that there is no row before either writes.
    await barriers.skewOf(first).reached();
    await barriers.skewOf(second).reached();
    barriers.skewOf(first).open();
    expect((await firstAnswer).status).toBe(201);
    // The second's INSERT fails: its read no longer holds.
    barriers.skewOf(second).open();
    expect(await secondAnswer).toEqual(UNAVAILABLE_ANSWER);
    expect(await payments(`skew/${second}`)).toEqual([]);
    expect(await record(second)).toBeUndefined();

    const retried = await answer(
      post('/drizzle/skew', second, { key: second }),
    );
    expect(retried.status).toBe(201);
    expect(retried.body).toEqual({ before: 1 });
    expect(await payments(`skew/${second}`)).toEqual([`skew/${second}`]);
  });
});

describe.each(PLATFORMS)(
  "a Drizzle database built on the pg adapter's connection (%s)",
  (platform) => {
    let target: AdapterApp;
    const { post, payments, ledger, record } = reader(() => target);

    beforeAll(async () => {
      target = await startAdapterApp(
        withModules(pgFixture, DrizzleOnPgModule),
        { platform },
      );
    });
    afterAll(() => target?.close());

    it("answers 503 and stores no record when its db.transaction() commits the handler's writes early", async () => {
      const key = randomUUID();
      expect(await answer(post('/drizzle-on-pg', key, { key }))).toEqual(
        UNAVAILABLE_ANSWER,
      );
      // Its COMMIT committed the payment and the first ledger entry; the
      // statement after it did not run, and no record says it was done.
      expect(await payments(key)).toEqual([key]);
      expect(await ledger(key)).toEqual([5]);
      expect(await record(key)).toBeUndefined();
    });
  },
);

describe('the Drizzle adapter on another client', () => {
  it.each([
    [
      'a Drizzle database on a single pg.Client',
      (url: string) =>
        drizzle({ client: new pg.Client({ connectionString: url }) }),
      'The Drizzle database of OTHER_DB is not made on a node-postgres Pool.',
    ],
    [
      'a pg.Pool',
      (url: string) => new pg.Pool({ connectionString: url }),
      'The provider of OTHER_DB is not a Drizzle database on node-postgres.',
    ],
  ])('stops the application at start-up: %s', async (_what, make, message) => {
    const fixture: AdapterFixture = {
      ...drizzleFixture,
      setUp(url) {
        @Module({
          providers: [{ provide: 'OTHER_DB', useValue: make(url) }],
          exports: ['OTHER_DB'],
        })
        class OtherModule {}
        return {
          ...withModules(drizzleFixture, OtherModule).setUp(url),
          adapter: new DrizzleIdempotencyAdapter({
            drizzleInstanceToken: 'OTHER_DB',
          }),
        };
      },
    };
    await expect(startAdapterApp(fixture)).rejects.toThrow(message);
  });
});
