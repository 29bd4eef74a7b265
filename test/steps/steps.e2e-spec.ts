import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import {
  IdempotencyCollector,
  type IdempotencyEvent,
} from '../../src/index.js';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../../migrations/index.js';
import { IdempotencyExecutor } from '../../src/core/idempotency.executor.js';
import { Barrier, until } from '../utils/barrier.js';
import { takeOver } from '../utils/claims.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
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
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    gateway = await new FakeGateway().start();
    target = await startTestApp({
      platform,
      imports: [stepsModule(gateway.url)],
      idempotency: { onEvent: (event) => events.push(event) },
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
  /** The gateway's charge calls under the key that the request holding `key` derives. */
  const chargeCalls = async (key: string) =>
    gateway.calls.get(await derivedKeyOf(target.db, key));
  /** The status and owner of the record of `key`. */
  const claimOf = (key: string) =>
    target.db.query(
      `SELECT status, owner FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );
  /** Every charge call the gateway received, whatever its key. */
  const allCalls = () =>
    [...gateway.calls.values()].reduce((sum, calls) => sum + calls, 0);

  /** A new first run of the routes with two steps, held between them. */
  const twoStepRuns = () => {
    faults.runs = 0;
    faults.secondSteps.length = 0;
    faults.betweenSteps = new Barrier();
  };

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
    expect(await chargeCalls('pay-1')).toBe(1);
    expect(gateway.chargeCount).toBe(1);
    expect(await orders('order-1')).toEqual([{ source: 'ch_1' }]);
    // Finished: its steps are gone, the record replays.
    expect(await steps('pay-1')).toEqual([]);
    const replay = await send(target, '/checkout', {
      key: 'pay-1',
      body: { amount: 1250, reference: 'order-1' },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await chargeCalls('pay-1')).toBe(1);
    expect(gateway.chargeCount).toBe(1);
  });

  it("binds a key with a committed step to its request: after the failed attempt, another body under the key gets 422 and never the first one's charge; the same body resumes", async () => {
    faults.failAfterCharge = true;
    const first = { amount: 100, reference: 'order-bound' };
    const failed = await send(target, '/checkout', {
      key: 'pay-bound',
      body: first,
    });
    expect(failed.status).toBe(500);
    expect(await steps('pay-bound')).toEqual([{ step: 'charge' }]);
    const runs = faults.runs;
    const derived = await derivedKeyOf(target.db, 'pay-bound');
    expect(gateway.calls.get(derived)).toBe(1);
    const charges = gateway.chargeCount;

    const other = await send(target, '/checkout', {
      key: 'pay-bound',
      body: { amount: 200, reference: 'order-other' },
    });
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(faults.runs).toBe(runs);
    expect(await orders('order-other')).toEqual([]);
    expect(gateway.calls.get(derived)).toBe(1);
    expect(gateway.chargeCount).toBe(charges);

    const resumed = await send(target, '/checkout', {
      key: 'pay-bound',
      body: first,
    });
    expect(resumed.status).toBe(201);
    const { charge } = (await resumed.json()) as {
      charge: { id: string; amount: number };
    };
    expect(charge.amount).toBe(100);
    expect(await derivedKeyOf(target.db, 'pay-bound')).toBe(derived);
    expect(gateway.calls.get(derived)).toBe(1);
    expect(gateway.chargeCount).toBe(charges);
    expect(await orders('order-bound')).toEqual([{ source: charge.id }]);
    expect(
      (
        await send(target, '/checkout', {
          key: 'pay-bound',
          body: { amount: 200, reference: 'order-other' },
        })
      ).status,
    ).toBe(422);
  });

  it('answers 503 without running a step whose claim the renewal found taken over: the gateway is not called', async () => {
    const request = send(target, '/checkout/paused', {
      key: 'paused-1',
      body: { amount: 40, reference: 'paused-1' },
    });
    await faults.beforeCharge.reached(1);
    const calls = allCalls();
    const derived = await derivedKeyOf(target.db, 'paused-1');
    const taker = await takeOver(target.db.url, 'paused-1');
    // The instance's next renewal, now: it finds the claim gone.
    await (
      target.app.get(IdempotencyExecutor) as unknown as {
        renewals: { renew(): Promise<void> };
      }
    ).renewals.renew();
    faults.beforeCharge.open();
    const response = await request;
    expect(response.status).toBe(503);
    expect(gateway.calls.get(derived)).toBeUndefined();
    expect(allCalls()).toBe(calls);
    expect(await steps('paused-1')).toEqual([]);
    expect(await claimOf('paused-1')).toEqual([
      { status: 'in_progress', owner: taker },
    ]);
  });

  it("answers 503 without running the next step of a request whose claim was taken over after its first step, before any renewal told it: the new owner's charge is the only one", async () => {
    twoStepRuns();
    const body = { amount: 45, reference: 'two-steps-1' };
    const request = send(target, '/checkout/two-steps', {
      key: 'two-steps-1',
      body,
    });
    await faults.betweenSteps.reached(1);
    expect(await steps('two-steps-1')).toEqual([{ step: 'reserve' }]);
    const calls = allCalls();
    // Its lease ran out while it was paused, and another attempt took the
    // key over; no renewal ran in between.
    const taker = await takeOver(target.db.url, 'two-steps-1');
    faults.betweenSteps.open();
    const response = await request;
    expect(response.status).toBe(503);
    expect(faults.secondSteps).toEqual(['1: LeaseLostError']);
    expect(allCalls()).toBe(calls);
    expect(await steps('two-steps-1')).toEqual([{ step: 'reserve' }]);
    expect(await orders('two-steps-1')).toEqual([]);
    expect(await claimOf('two-steps-1')).toEqual([
      { status: 'in_progress', owner: taker },
    ]);
  });

  it("runs no later step of a handler abandoned at its deadline: its retry's charge is the only one", async () => {
    twoStepRuns();
    const body = { amount: 55, reference: 'hung-1' };
    const hung = await send(target, '/checkout/hung', { key: 'hung-1', body });
    expect(hung.status).toBe(503);
    const calls = allCalls();
    // The retry resumes after the step the abandoned attempt saved.
    const retry = await send(target, '/checkout/hung', { key: 'hung-1', body });
    expect(retry.status).toBe(201);
    const { charge, reserved } = (await retry.json()) as {
      charge: { id: string };
      reserved: number;
    };
    expect(reserved).toBe(1);
    expect(allCalls()).toBe(calls + 1);
    expect(await chargeCalls('hung-1')).toBe(1);
    // The abandoned handler goes on to its second step now: refused.
    faults.betweenSteps.open();
    await until(
      () => Promise.resolve(faults.secondSteps.length === 2),
      'the abandoned handler to reach its second step',
    );
    expect(faults.secondSteps).toEqual([
      '2: charged',
      '1: IdempotencyUnavailableException',
    ]);
    expect(allCalls()).toBe(calls + 1);
    expect(await orders('hung-1')).toEqual([{ source: charge.id }]);
  });

  describe('with a ttl shorter than the handler', () => {
    beforeEach(() => {
      faults.runs = 0;
      faults.shortHold = new Barrier();
      faults.shortCharges.length = 0;
    });

    it("keeps a step until ttl after its attempt's deadline: the retry resumes, the gateway charges once", async () => {
      const key = randomUUID();
      const first = send(target, '/checkout/short', {
        key,
        body: { amount: 70, hold: 'after' },
      });
      await until(
        () => Promise.resolve(faults.shortCharges.length === 1),
        'the first run to charge',
      );
      // The subject is the ttl (1 s) running out while the attempt lives.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      faults.shortHold.open();
      expect([500, 503]).toContain((await first).status);
      const retry = await send(target, '/checkout/short', {
        key,
        body: { amount: 70, hold: 'after' },
      });
      expect(retry.status).toBe(201);
      expect(await retry.json()).toEqual({
        charge: { id: expect.any(String), amount: 70 },
        run: 2,
      });
      expect(faults.shortCharges).toHaveLength(1);
      expect(gateway.calls.get(faults.shortCharges[0])).toBe(1);
    });

    it("keeps the key bound past its attempt's deadline: the retry of an abandoned step derives the same downstream key", async () => {
      const key = randomUUID();
      const charges = gateway.chargeCount;
      const abandoned = await send(target, '/checkout/short', {
        key,
        body: { amount: 80, hold: 'in' },
      });
      expect(abandoned.status).toBe(503);
      const retry = await send(target, '/checkout/short', {
        key,
        body: { amount: 80, hold: 'in' },
      });
      expect(retry.status).toBe(201);
      faults.shortHold.open();
      expect(faults.shortCharges).toHaveLength(2);
      expect(faults.shortCharges[1]).toBe(faults.shortCharges[0]);
      // The gateway deduplicated the second call under the same key.
      expect(gateway.calls.get(faults.shortCharges[0])).toBe(2);
      expect(gateway.chargeCount).toBe(charges + 1);
    });

    it('gives a retry that took the key over the steps of its generation however late it reads them, and the collector keeps them', async () => {
      faults.lateRead = new Barrier();
      const key = randomUUID();
      const failed = await send(target, '/checkout/resumed', {
        key,
        body: { amount: 90 },
      });
      expect(failed.status).toBe(500);
      const calls = allCalls();
      // Past the ttl (300 ms) after the failure, within the binding: the
      // retry's deadline (3 s) then ends after the steps' own expiry.
      await new Promise((resolve) => setTimeout(resolve, 1_300));
      const retry = send(target, '/checkout/resumed', {
        key,
        body: { amount: 90 },
      });
      await until(
        async () =>
          (
            await target.db.query<{ expired: boolean }>(
              `SELECT bool_and(expires_at < now()) AS expired
                 FROM ${IDEMPOTENCY_STEPS_TABLE_NAME} WHERE key = $1`,
              [key],
            )
          )[0].expired === true,
        "the steps' own expiry",
      );
      await target.app.get(IdempotencyCollector).collect();
      expect(await steps(key)).toEqual([
        { step: 'charge' },
        { step: 'reserve' },
      ]);
      faults.lateRead.open();
      const answer = await retry;
      expect(answer.status).toBe(201);
      expect(await answer.json()).toEqual({
        charge: { id: expect.any(String), amount: 90 },
        reserved: 1,
        run: 2,
      });
      expect(allCalls()).toBe(calls);
    });
  });

  it('keeps the steps of different keys apart, and derives a downstream key of its own for each request key', async () => {
    await send(target, '/checkout', {
      key: 'pay-2',
      body: { amount: 10, reference: 'order-2' },
    });
    await send(target, '/checkout', {
      key: 'pay-3',
      body: { amount: 20, reference: 'order-3' },
    });
    const derived2 = await derivedKeyOf(target.db, 'pay-2');
    const derived3 = await derivedKeyOf(target.db, 'pay-3');
    expect(derived3).not.toBe(derived2);
    expect([gateway.calls.get(derived2), gateway.calls.get(derived3)]).toEqual([
      1, 1,
    ]);
    expect((await orders('order-3'))[0].source).not.toBe(
      (await orders('order-2'))[0].source,
    );
  });

  it("warns once per route of a step run while the handler's transaction is open, and still runs it once", async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      for (const key of ['late-1', 'late-2']) {
        const response = await send(target, '/checkout/late', {
          key,
          body: { amount: 5, reference: key },
        });
        expect(response.status).toBe(201);
        expect(await chargeCalls(key)).toBe(1);
      }
      // A step before the first statement holds no connection: no warning.
      await send(target, '/checkout', {
        key: 'early-1',
        body: { amount: 5, reference: 'early-1' },
      });
      const warnings = warn.mock.calls
        .map(([message]) => String(message))
        .filter((message) => message.includes(' runs while '));
      expect(warnings).toEqual([
        `POST /checkout/late step "charge" runs while the handler's transaction is open: its connection is held during the step. Run steps before the handler's first database statement.`,
      ]);
    } finally {
      warn.mockRestore();
    }
    expect(await orders('late-1')).toEqual([{ source: 'late' }]);
    expect(await steps('late-1')).toEqual([]);
  });

  it('answers 503 to a request whose claim was taken over while its step ran, and commits neither the step nor its writes', async () => {
    const request = send(target, '/checkout/held', {
      key: 'held-1',
      body: { amount: 30, reference: 'held-1' },
    });
    await faults.charged.reached(1);
    // The key the attempt charged under; the takeover keeps its generation.
    const derived = await derivedKeyOf(target.db, 'held-1');
    const calls = allCalls();
    const taker = await takeOver(target.db.url, 'held-1');
    expect(await derivedKeyOf(target.db, 'held-1')).toBe(derived);
    faults.charged.open();
    const response = await request;
    expect(response.status).toBe(503);
    expect(response.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(response.headers.get('retry-after')).toBe('1');
    expect(((await response.json()) as { type: string }).type).toBe(
      'urn:idempotency:unavailable',
    );
    // The gateway was called; the step's result was not saved under the
    // new owner's claim, which the failed attempt did not release either.
    expect(gateway.calls.get(derived)).toBe(1);
    expect(allCalls()).toBe(calls);
    expect(await steps('held-1')).toEqual([]);
    expect(await orders('held-1')).toEqual([]);
    expect(await claimOf('held-1')).toEqual([
      { status: 'in_progress', owner: taker },
    ]);
    expect(events.filter((e) => e.key === 'held-1').map((e) => e.type)).toEqual(
      ['lease-lost'],
    );
  });
});
