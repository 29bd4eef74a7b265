import type { ClientProxy } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import type { IdempotencyEvent } from '../../src/index.js';
import { Barrier, until } from '../utils/barrier.js';
import { watchClaims, type ClaimWatch } from '../utils/claims.js';
import type { TestApp } from '../utils/test-app.js';
import { describeWithBroker } from '../utils/broker.js';
import {
  NATS_HOST,
  NATS_PORT,
  startMessageApp,
  type MessageApp,
} from './message-app.js';
import { Handlers, NatsTestModule, SUBJECTS } from './nats.module.js';

const describeNats = await describeWithBroker('NATS', NATS_HOST, NATS_PORT);

describeNats('@Idempotent() on NATS handlers', () => {
  let nats: MessageApp;
  let target: TestApp;
  let client: ClientProxy;
  let handlers: Handlers;
  let claims: ClaimWatch;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    nats = await startMessageApp({
      imports: [NatsTestModule],
      idempotency: { onEvent: (event) => events.push(event) },
    });
    ({ target, client } = nats);
    handlers = target.app.get(Handlers);
    claims = watchClaims(target.app);
  });
  afterAll(() => nats.close());
  beforeEach(() => {
    handlers.barrier = new Barrier();
    handlers.runs = 0;
    events.length = 0;
  });

  const request = (subject: string, data: unknown) =>
    nats.request(subject, data);
  const rows = (reference: string) => nats.orders(reference);

  it('runs concurrent duplicate requests once; the waiting ones get the identical reply', async () => {
    const message = { idempotencyKey: 'nats-1', reference: 'nats-1' };
    const replies = Array.from({ length: 10 }, () =>
      request(SUBJECTS.wait, message),
    );
    await handlers.barrier.reached(1);
    // Every duplicate found the key held, and waits for it holding no
    // connection (the pool has 10, and the first holds one).
    await claims.reached('nats-1', 'in_progress', 9);
    handlers.barrier.open();
    const answers = await Promise.all(replies);
    expect(answers.map((a) => a.reply)).toEqual(
      Array(10).fill({ orderId: expect.any(Number), run: 1 }),
    );
    expect(new Set(answers.map((a) => JSON.stringify(a.reply))).size).toBe(1);
    expect(handlers.runs).toBe(1);
    expect(await rows('nats-1')).toBe(1);
  });

  it('refuses a concurrent duplicate in reject mode, and replays after completion', async () => {
    const message = { idempotencyKey: 'nats-2', reference: 'nats-2' };
    const first = request(SUBJECTS.reject, message);
    await handlers.barrier.reached(1);
    const duplicate = await request(SUBJECTS.reject, message);
    expect(duplicate.error).toMatchObject({
      type: 'urn:idempotency:request-in-progress',
      status: 409,
    });
    handlers.barrier.open();
    const done = await first;
    expect(done.reply).toEqual({ orderId: expect.any(Number), run: 1 });
    expect((await request(SUBJECTS.reject, message)).reply).toEqual(done.reply);
    expect(handlers.runs).toBe(1);
    expect(await rows('nats-2')).toBe(1);
  });

  it('refuses a message without a key and one reusing a key for other data', async () => {
    handlers.barrier.open();
    const keyless = await request(SUBJECTS.reject, { reference: 'nats-3' });
    expect(keyless.error).toMatchObject({
      type: 'urn:idempotency:missing-key',
      status: 400,
      detail: 'This message requires an "idempotencyKey" field.',
    });
    expect(handlers.runs).toBe(0);
    const malformed = await request(SUBJECTS.reject, {
      idempotencyKey: 'nats 3',
      reference: 'nats-3',
    });
    expect(malformed.error).toMatchObject({
      type: 'urn:idempotency:invalid-key',
      status: 400,
      detail:
        'The "idempotencyKey" field is invalid: it has an invalid format.',
    });
    expect(handlers.runs).toBe(0);
    await request(SUBJECTS.reject, {
      idempotencyKey: 'nats-4',
      reference: 'nats-4',
    });
    const reused = await request(SUBJECTS.reject, {
      idempotencyKey: 'nats-4',
      reference: 'other',
    });
    expect(reused.error).toMatchObject({
      type: 'urn:idempotency:key-reused',
      status: 422,
    });
    expect(handlers.runs).toBe(1);
    expect(await rows('other')).toBe(0);
  });

  it('refuses the same key and data on another subject of a wildcard pattern, and replays it on the same subject', async () => {
    handlers.barrier.open();
    const subject = (account: string) =>
      SUBJECTS.accounts.replace('*', account);
    const message = { idempotencyKey: 'nats-6', reference: 'nats-6' };
    const first = await request(subject('A'), message);
    expect(first.reply).toEqual({ orderId: expect.any(Number), run: 1 });
    const other = await request(subject('B'), message);
    expect(other.error).toMatchObject({
      type: 'urn:idempotency:key-reused',
      status: 422,
    });
    expect((await request(subject('A'), message)).reply).toEqual(first.reply);
    expect(handlers.runs).toBe(1);
    expect(await rows('nats-6')).toBe(1);
    // Alone on its subjects: its records keep the message's key as it is.
    expect([
      ...new Set(
        events.filter((e) => e.key?.startsWith('nats-6')).map((e) => e.key),
      ),
    ]).toEqual(['nats-6']);
  });

  it('handles a redelivered event once and drops the duplicates', async () => {
    handlers.barrier.open();
    const message = { idempotencyKey: 'nats-5', reference: 'nats-5' };
    const deliveries = () => events.filter((e) => e.key === 'nats-5');
    for (let i = 1; i <= 3; i += 1) {
      await lastValueFrom(client.emit(SUBJECTS.event, message), {
        defaultValue: undefined,
      });
      await until(async () => deliveries().length === i, `delivery ${i}`);
    }
    expect(events.filter((e) => e.key === 'nats-5').map((e) => e.type)).toEqual(
      ['executed', 'replayed', 'replayed'],
    );
    expect(handlers.runs).toBe(1);
    expect(await rows('nats-5')).toBe(1);
  });

  /**
   * Emits the event of `key` on `subject` three times, each time until both
   * of its handlers had it: each ran it once under its own key of `keys`
   * and replayed it twice, no other key was used, and both committed their
   * order.
   */
  const deliverThriceToBoth = async (
    subject: string,
    key: string,
    keys: readonly string[],
  ) => {
    handlers.barrier.open();
    const message = { idempotencyKey: key, reference: key };
    const deliveries = () => events.filter((e) => e.key?.startsWith(key));
    for (let i = 1; i <= 3; i += 1) {
      await lastValueFrom(client.emit(subject, message), {
        defaultValue: undefined,
      });
      await until(
        async () => deliveries().length === 2 * i,
        `delivery ${i} to both handlers`,
      );
    }
    for (const each of keys) {
      expect(events.filter((e) => e.key === each).map((e) => e.type)).toEqual([
        'executed',
        'replayed',
        'replayed',
      ]);
    }
    expect(deliveries().filter((e) => !keys.includes(e.key!))).toEqual([]);
    expect(handlers.runs).toBe(2);
    expect(
      await target.db.query(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY source',
        [key],
      ),
    ).toEqual([{ source: 'ledger' }, { source: 'nats' }]);
  };

  it('runs an event once in each of the two handlers of its subject, each under a key of its own, and drops its duplicates in both', async () => {
    await deliverThriceToBoth(SUBJECTS.shared, 'nats-shared', [
      'nats-shared#PaymentsConsumer.shared',
      'nats-shared#LedgerConsumer.booked',
    ]);
  });

  it('runs an event once in both a wildcard handler and an exact handler of its subject, each under a key of its own', async () => {
    await deliverThriceToBoth(SUBJECTS.overlapA, 'nats-overlap', [
      'nats-overlap#PaymentsConsumer.overlapA',
      'nats-overlap#LedgerConsumer.overlapAll',
    ]);
  });
});
