import { IDEMPOTENCY_STEPS_TABLE_NAME } from '../../src/index.js';
import {
  send,
  PLATFORMS,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { Faults, stepsModule } from './steps.module.js';

describe.each(PLATFORMS)('recovery points (%s)', (platform) => {
  let gateway: FakeGateway;
  let target: TestApp;
  let faults: Faults;

  beforeAll(async () => {
    gateway = await new FakeGateway().start();
    target = await startTestApp({
      platform,
      imports: [stepsModule(gateway.url)],
    });
    faults = target.app.get(Faults);
  });
  afterAll(async () => {
    await target.close();
    await gateway.stop();
  });

  const steps = (key: string) =>
    target.db.query<{ step: string }>(
      `SELECT step FROM ${IDEMPOTENCY_STEPS_TABLE_NAME} WHERE key = $1 ORDER BY step`,
      [key],
    );
  const orders = (reference: string) =>
    target.db.query<{ source: string }>(
      'SELECT source FROM orders WHERE reference = $1',
      [reference],
    );

  it('resumes after the last completed step: the gateway charges once, the order is written once', async () => {
    faults.failAfterCharge = true;
    const failed = await send(target, '/checkout', {
      key: 'pay-1',
      body: { amount: 1250, reference: 'order-1' },
    });
    expect(failed.status).toBe(500);
    // The charge survived the rollback; the order did not.
    expect(await steps('pay-1')).toEqual([{ step: 'charge' }]);
    expect(await orders('order-1')).toEqual([]);

    const retried = await send(target, '/checkout', {
      key: 'pay-1',
      body: { amount: 1250, reference: 'order-1' },
    });
    expect(retried.status).toBe(201);
    expect(await retried.json()).toEqual({
      orderId: expect.any(Number),
      charge: { id: 'ch_1', amount: 1250 },
      receipt: 'receipt-for-ch_1',
    });
    expect(faults.runs).toBe(2);
    expect(gateway.calls.get('pay-1:charge')).toBe(1);
    expect(gateway.chargeCount).toBe(1);
    expect(await orders('order-1')).toEqual([{ source: 'ch_1' }]);
    // Finished: its steps are gone, the record replays.
    expect(await steps('pay-1')).toEqual([]);
    const replay = await send(target, '/checkout', {
      key: 'pay-1',
      body: { amount: 1250, reference: 'order-1' },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(gateway.calls.get('pay-1:charge')).toBe(1);
  });

  it('keeps the steps of different keys apart, and derives downstream keys from the request key', async () => {
    await send(target, '/checkout', {
      key: 'pay-2',
      body: { amount: 10, reference: 'order-2' },
    });
    await send(target, '/checkout', {
      key: 'pay-3',
      body: { amount: 20, reference: 'order-3' },
    });
    expect(gateway.calls.get('pay-2:charge')).toBe(1);
    expect(gateway.calls.get('pay-3:charge')).toBe(1);
    expect((await orders('order-3'))[0].source).not.toBe(
      (await orders('order-2'))[0].source,
    );
  });
});
