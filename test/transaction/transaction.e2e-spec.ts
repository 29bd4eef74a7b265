import { IDEMPOTENCY_TABLE_NAME } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
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

  it('routes every data access style of the application through one transaction', async () => {
    const response = await send(target, '/every-style', {
      key: 'styles-1',
      body: { reference: 'r3' },
    });
    expect(response.status).toBe(201);
    const txids = (await response.json()) as Record<string, string>;
    expect(Object.keys(txids)).toHaveLength(7);
    expect(new Set(Object.values(txids)).size).toBe(1);
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
});
