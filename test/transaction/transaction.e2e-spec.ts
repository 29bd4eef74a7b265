import {
  EntityManager,
  type EntitySubscriberInterface,
  type TransactionCommitEvent,
} from 'typeorm';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Barrier } from '../utils/barrier.js';
import { pooledOutsideTransactions } from '../utils/sessions.js';
import { OrdersService, TransactionTestModule } from './transaction.module.js';

describe.each(PLATFORMS)('the shared transaction (%s)', (platform) => {
  let target: TestApp;
  let service: OrdersService;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [TransactionTestModule],
      platform,
    });
    service = target.app.get(OrdersService);
  });
  afterAll(() => target.close());
  beforeEach(async () => {
    service.runs = 0;
    await target.db.query(`TRUNCATE orders, ${IDEMPOTENCY_TABLE_NAME}`);
  });

  const orders = (reference: string) =>
    target.db.query<{ reference: string; source: string }>(
      'SELECT reference, source FROM orders WHERE reference = $1 ORDER BY id',
      [reference],
    );
  const records = (key: string) =>
    target.db.query<{ status: string; response_status: number }>(
      `SELECT status, response_status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );

  it('commits the domain row and the record together, before the response', async () => {
    const response = await send(target, '/orders', {
      key: 'first-1',
      body: { reference: 'r1' },
    });
    expect(response.status).toBe(201);
    const body = (await response.json()) as { reference: string };
    expect(body.reference).toBe('r1');
    // Read at once from another connection: both are already committed.
    expect(await orders('r1')).toHaveLength(1);
    expect(await records('first-1')).toEqual([
      { status: 'completed', response_status: 201 },
    ]);
  });

  it("claims the key in a statement of its own, and holds no transaction until the handler's first statement", async () => {
    service.barrier = new Barrier();
    const response = send(target, '/held', {
      key: 'held-1',
      body: { reference: 'r7' },
    });
    await service.barrier.reached(1);
    // The claim is committed, and seen from another connection...
    expect(await records('held-1')).toEqual([
      { status: 'in_progress', response_status: null },
    ]);
    // ...while no session of the application has a transaction open.
    expect(
      await target.db.query(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND (xact_start IS NOT NULL OR backend_xid IS NOT NULL)`,
      ),
    ).toEqual([]);
    service.barrier.open();
    expect((await response).status).toBe(201);
    expect(await orders('r7')).toHaveLength(1);
    expect(await records('held-1')).toEqual([
      { status: 'completed', response_status: 201 },
    ]);
  });

  it('rolls back the domain row when the handler throws, and runs again on retry', async () => {
    const failed = await send(target, '/orders', {
      key: 'fail-1',
      body: { reference: 'r2', fail: true },
    });
    expect(failed.status).toBe(400);
    expect(await failed.json()).toEqual({
      statusCode: 400,
      message: 'card declined',
      error: 'Bad Request',
    });
    expect(await orders('r2')).toHaveLength(0);
    expect(await records('fail-1')).toHaveLength(0);

    const retried = await send(target, '/orders', {
      key: 'fail-1',
      body: { reference: 'r2', fail: true },
    });
    expect(retried.status).toBe(400);
    expect(service.runs).toBe(2);
    expect(await orders('r2')).toHaveLength(0);
  });

  it('routes every data access style of the application through one transaction, the one that completes the record', async () => {
    const response = await send(target, '/every-style', {
      key: 'styles-1',
      body: { reference: 'r3' },
    });
    expect(response.status).toBe(201);
    const txids = (await response.json()) as Record<string, string>;
    expect(Object.keys(txids)).toHaveLength(9);
    expect(new Set(Object.values(txids)).size).toBe(1);
    // The record was completed by that same transaction.
    const [{ xid }] = await target.db.query<{ xid: string }>(
      `SELECT xmin::text AS xid FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'styles-1'`,
    );
    expect(BigInt(xid)).toBe(BigInt(txids.rawQuery) % 2n ** 32n);
    expect((await orders('r3')).map((o) => o.source)).toEqual(
      Object.keys(txids),
    );
  });

  it('leaves no row of any style behind when the handler throws', async () => {
    const response = await send(target, '/every-style', {
      key: 'styles-2',
      body: { reference: 'r4', fail: true },
    });
    expect(response.status).toBe(400);
    expect(await orders('r4')).toHaveLength(0);
    expect(await records('styles-2')).toHaveLength(0);
  });

  it.each([
    ['fails', true, 400],
    ['succeeds', false, 201],
  ] as const)(
    'refuses every style of write the handler did not await, sent once its transaction ended, when it %s: nothing commits apart from the record, and a retry adds none',
    async (_what, fail, status) => {
      const key = `late-${String(fail)}`;
      const sendLate = () =>
        send(target, '/late', { key, body: { reference: key, fail } });
      service.lateGate = new Barrier();
      const answer = await sendLate();
      expect(answer.status).toBe(status);
      // The answer came: the module has committed or rolled back.
      service.lateGate.open();
      const refused = Object.fromEntries(
        Object.keys(await service.late!).map((style) => [
          style,
          'TransactionClosedError',
        ]),
      );
      expect(Object.keys(refused)).toHaveLength(9);
      expect(await service.late).toEqual(refused);
      const retry = await sendLate();
      expect(retry.status).toBe(status);
      if (fail) {
        await service.late;
      }
      expect(await orders(`${key}:late`)).toEqual([]);
      expect(await orders(key)).toHaveLength(fail ? 0 : 1);
    },
  );

  it('answers 503 and commits nothing when the handler returns with a transaction of its own still open, and never hands the pool a connection inside it', async () => {
    service.nestedStarted = new Barrier();
    service.nestedHeld = new Barrier();
    const answer = await send(target, '/unfinished', {
      key: 'unfinished-1',
      body: { reference: 'unfinished' },
    });
    expect(answer.status).toBe(503);
    service.nestedHeld.open();
    // Its end fails: the handler's transaction is gone.
    expect(await service.nested).not.toBe('committed');
    expect(await orders('unfinished')).toEqual([]);
    expect(await records('unfinished-1')).toEqual([]);
    // Every connection of the pool is outside of any transaction.
    expect(
      await pooledOutsideTransactions(
        (sql) => target.dataSource.query(sql),
        10,
      ),
    ).toEqual(Array.from({ length: 10 }, () => true));
  });

  it("lets TypeORM's subscribers write after the commit, as ever: the request succeeds and its record is completed", async () => {
    let audit = true;
    const subscriber: EntitySubscriberInterface = {
      async afterTransactionCommit(event: TransactionCommitEvent) {
        if (audit) {
          audit = false;
          await event.queryRunner.query(
            `INSERT INTO orders (reference, source) VALUES ('subscribed', 'after-commit')`,
          );
        }
      },
    };
    target.dataSource.subscribers.push(subscriber);
    try {
      const answer = await send(target, '/orders', {
        key: 'subscribed-1',
        body: { reference: 'subscribed' },
      });
      expect(answer.status).toBe(201);
      expect((await orders('subscribed')).map((o) => o.source)).toEqual([
        'api',
        'after-commit',
      ]);
      expect(await records('subscribed-1')).toEqual([
        { status: 'completed', response_status: 201 },
      ]);
    } finally {
      target.dataSource.subscribers.splice(
        target.dataSource.subscribers.indexOf(subscriber),
        1,
      );
    }
  });

  it('leaves undecorated routes untouched: their writes autocommit as before', async () => {
    const response = await send(target, '/plain', {
      body: { reference: 'r5', fail: true },
    });
    expect(response.status).toBe(400);
    expect(await orders('r5')).toHaveLength(1);
    expect(
      await target.db.query(`SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME}`),
    ).toHaveLength(0);
  });

  it('behaves as before outside a handler', async () => {
    await target.dataSource.getRepository('Order').insert({ reference: 'r6' });
    expect(await orders('r6')).toHaveLength(1);
  });

  it('redirects the managers from their class, setting no method on any manager nor changing its prototype, and keeps the redirect while another application runs', async () => {
    const methodsOf = (manager: EntityManager) =>
      Object.getOwnPropertyNames(manager).filter(
        (name) =>
          typeof (manager as unknown as Record<string, unknown>)[name] ===
          'function',
      );
    const managers = [
      target.dataSource.manager,
      target.dataSource.createEntityManager(),
      new EntityManager(target.dataSource),
    ];
    for (const manager of managers) {
      expect(methodsOf(manager)).toEqual([]);
      expect(Object.getPrototypeOf(manager)).toBe(EntityManager.prototype);
    }

    const other = await startTestApp({
      imports: [TransactionTestModule],
      platform,
    });
    const otherManager = other.dataSource.manager;
    await other.close();
    expect(Object.getPrototypeOf(otherManager)).toBe(EntityManager.prototype);
    expect(methodsOf(otherManager)).toEqual([]);
    // This application's handlers still write in their transactions.
    const failed = await send(target, '/orders', {
      key: 'after-other',
      body: { reference: 'after-other', fail: true },
    });
    expect(failed.status).toBe(400);
    expect(await orders('after-other')).toEqual([]);
  });
});
