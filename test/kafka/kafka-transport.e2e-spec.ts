import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { KafkaContext } from '@nestjs/microservices';
import type { IHeaders } from 'kafkajs';
import {
  IdempotencyNotReplayableException,
  type IdempotencyHttpException,
} from '../../src/index.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import { holdInTransaction } from '../utils/test-database.js';
import {
  RecordedKafkaServer,
  recordedKafka,
  SENT_AT,
  type RecordedConsumer,
} from './recorded-kafka.js';
import {
  AUTO_TOPIC,
  KafkaHandlers,
  KafkaTestModule,
  RECEIPTS_TOPIC,
  REFUNDS_TOPIC,
  TOPIC,
  deadLetters,
} from './kafka.module.js';

/**
 * An application on Nest's Kafka transport whose kafkajs consumer is
 * recorded, run with `run`; at each commit of an offset, the records and
 * payments that committed then are read.
 */
async function startKafkaApp(run: {
  autoCommit?: boolean;
}): Promise<{ target: TestApp; recorded: RecordedConsumer }> {
  const target = await startTestApp({ imports: [KafkaTestModule] });
  const client = recordedKafka('payments-group-server');
  target.app.connectMicroservice(
    {
      strategy: new RecordedKafkaServer(
        { consumer: { groupId: 'payments-group' }, run },
        client.kafka,
      ),
    },
    { inheritAppConfig: true },
  );
  await target.app.startAllMicroservices();
  client.recorded.onCommit = async () => ({
    records: await target.db.query(
      `SELECT key, status FROM idempotency_records ORDER BY key`,
    ),
    // By reference, not by id: the two handlers of a topic run side by side.
    orders: await target.db.query(
      `SELECT reference FROM orders ORDER BY reference`,
    ),
  });
  return { target, recorded: client.recorded };
}

describe('@Idempotent() on a Kafka consumer of the Nest transport (recorded kafkajs consumer, no broker)', () => {
  let target: TestApp;
  let recorded: RecordedConsumer;
  let handlers: KafkaHandlers;
  let offset = 100;

  beforeAll(async () => {
    // The module commits each offset, after the record.
    ({ target, recorded } = await startKafkaApp({ autoCommit: false }));
    handlers = target.app.get(KafkaHandlers);
  });
  afterAll(() => target?.close());
  beforeEach(async () => {
    recorded.calls.length = 0;
    deadLetters.length = 0;
    handlers.runs = 0;
    handlers.deliveries.clear();
    await target.db.query(
      'TRUNCATE orders, idempotency_records, idempotency_failures',
    );
  });

  /** The next offset of the partition. */
  const next = () => String((offset += 1));
  const orders = async () =>
    (
      await target.db.query<{ reference: string }>(
        'SELECT reference FROM orders ORDER BY id',
      )
    ).map((row) => row.reference);
  const records = () =>
    target.db.query('SELECT key, status FROM idempotency_records ORDER BY key');

  it('runs the Nest transport on the recorded consumer: subscribed to the topics of the handlers, run without auto-commit', () => {
    expect(recorded.subscriptions).toEqual([
      { topics: [TOPIC, REFUNDS_TOPIC, AUTO_TOPIC, RECEIPTS_TOPIC] },
    ]);
    expect(recorded.runConfig).toMatchObject({ autoCommit: false });
  });

  it("takes the key from the module's key header: a copy produced again at another offset runs nothing", async () => {
    const headers = { 'Idempotency-Key': Buffer.from('payment-1') };
    const first = next();
    const copy = next();
    await recorded.deliver(TOPIC, 0, {
      offset: first,
      value: { reference: 'p-1' },
      headers,
    });
    await recorded.deliver(TOPIC, 0, {
      offset: copy,
      value: { reference: 'p-1' },
      headers,
    });
    expect(handlers.runs).toBe(1);
    expect(await orders()).toEqual(['p-1']);
    expect(await records()).toEqual([
      { key: 'payment-1', status: 'completed' },
    ]);
    // Both offsets committed, the copy's too: it no longer blocks.
    expect(
      recorded.calls
        .filter((call) => call.call === 'commitOffsets')
        .map((call) => call.offsets),
    ).toEqual([
      [{ topic: TOPIC, partition: 0, offset: String(Number(first) + 1) }],
      [{ topic: TOPIC, partition: 0, offset: String(Number(copy) + 1) }],
    ]);
  });

  it('falls back to topic/partition/offset without a key header: a redelivery of the same offset runs nothing', async () => {
    const at = next();
    await recorded.deliver(TOPIC, 3, {
      offset: at,
      value: { reference: 'p-2' },
    });
    await recorded.deliver(TOPIC, 3, {
      offset: at,
      value: { reference: 'p-2' },
    });
    expect(handlers.runs).toBe(1);
    expect(await orders()).toEqual(['p-2']);
    expect(await records()).toEqual([
      {
        key: `PaymentsKafkaConsumer.paid@${TOPIC}/3/${at}@${SENT_AT}`,
        status: 'completed',
      },
    ]);
  });

  it("keys a message by its place in the log under key rules the place breaks (they are the producers'): it runs once, never dropped", async () => {
    const at = next();
    for (let delivery = 0; delivery < 2; delivery += 1) {
      await recorded.deliver(RECEIPTS_TOPIC, 0, {
        offset: at,
        value: { reference: 'r-1' },
      });
    }
    expect(handlers.runs).toBe(1);
    expect(await orders()).toEqual(['r-1']);
    expect(await records()).toEqual([
      {
        key: `ReceiptsKafkaConsumer.received@${RECEIPTS_TOPIC}/0/${at}@${SENT_AT}`,
        status: 'completed',
      },
    ]);
  });

  it("takes the key header when the payload's idempotencyKey field is null", async () => {
    const headers = { 'Idempotency-Key': Buffer.from('receipt-2') };
    for (const at of [next(), next()]) {
      await recorded.deliver(RECEIPTS_TOPIC, 0, {
        offset: at,
        value: { idempotencyKey: null, reference: 'r-2' },
        headers,
      });
    }
    expect(handlers.runs).toBe(1);
    expect(await orders()).toEqual(['r-2']);
    expect(await records()).toEqual([
      { key: 'receipt-2', status: 'completed' },
    ]);
  });

  it('tells a message from an older one at the same place of a topic deleted and created again (offsets start over) by its timestamp: it runs', async () => {
    const at = next();
    await recorded.deliver(TOPIC, 6, {
      offset: at,
      value: { reference: 'p-old' },
    });
    await recorded.deliver(TOPIC, 6, {
      offset: at,
      value: { reference: 'p-new' },
      timestamp: String(Number(SENT_AT) + 86_400_000),
    });
    expect(handlers.runs).toBe(2);
    expect(await orders()).toEqual(['p-old', 'p-new']);
  });

  it('commits the offset only after the record and the writes committed together, and not at all for a failed delivery', async () => {
    const at = next();
    const done = await recorded.deliver(
      TOPIC,
      1,
      { offset: at, value: { reference: 'p-3', failures: 1 } },
      2,
    );
    expect(done).toBe(true);
    expect(recorded.calls).toEqual([
      { call: 'eachMessage', offset: at },
      {
        call: 'failed',
        offset: at,
        // What Nest's exception filter makes of the handler's error.
        error: 'Internal server error',
      },
      { call: 'eachMessage', offset: at },
      {
        call: 'commitOffsets',
        offsets: [
          { topic: TOPIC, partition: 1, offset: String(Number(at) + 1) },
        ],
        // Seen at the moment of the commit: the record and the payment.
        seen: {
          records: [
            {
              key: `PaymentsKafkaConsumer.paid@${TOPIC}/1/${at}@${SENT_AT}`,
              status: 'completed',
            },
          ],
          orders: [{ reference: 'p-3' }],
        },
      },
    ]);
    // The failed delivery's write rolled back: one payment.
    expect(await orders()).toEqual(['p-3']);
    expect(deadLetters).toEqual([]);
  });

  it('hands a poison message to the dead-letter path after maxAttempts failures counted in the store, then commits its offset: the partition moves on', async () => {
    const poison = next();
    const after = next();
    const done = await recorded.deliver(
      TOPIC,
      2,
      { offset: poison, value: { reference: 'poison', failures: 'always' } },
      10,
    );
    expect(done).toBe(true);
    expect(recorded.calls.map((call) => call.call)).toEqual([
      'eachMessage',
      'failed',
      'eachMessage',
      'failed',
      'eachMessage',
      'commitOffsets',
    ]);
    expect(handlers.runs).toBe(3);
    expect(deadLetters).toEqual([
      {
        scope: 'global',
        key: `PaymentsKafkaConsumer.paid@${TOPIC}/2/${poison}@${SENT_AT}`,
        pattern: TOPIC,
        data: { reference: 'poison', failures: 'always' },
        error: new Error('delivery 3 of poison failed'),
        attempts: 3,
        context: expect.any(KafkaContext),
      },
    ]);
    expect((deadLetters[0].context as KafkaContext).getMessage().offset).toBe(
      poison,
    );
    // Nothing of the poison message committed; its count is forgotten.
    expect(await orders()).toEqual([]);
    expect(
      await target.db.query('SELECT key, failures FROM idempotency_failures'),
    ).toEqual([]);
    expect(await records()).toEqual([]);

    await recorded.deliver(TOPIC, 2, {
      offset: after,
      value: { reference: 'after-poison' },
    });
    expect(await orders()).toEqual(['after-poison']);
  });

  it('hands to the dead-letter path at once a message whose handler threw the refusal of a nested run() whose result was not stored, never acknowledging it as a duplicate of its own: its write rolled back', async () => {
    const first = next();
    const second = next();
    await recorded.deliver(TOPIC, 4, {
      offset: first,
      value: { reference: 'statement-a', statement: 'statement-1' },
    });
    await recorded.deliver(TOPIC, 4, {
      offset: second,
      value: { reference: 'statement-b', statement: 'statement-1' },
    });
    expect(handlers.runs).toBe(2);
    // Before the fix: acknowledged (its offset committed) as a duplicate
    // whose result was not stored, with nothing handed over or logged.
    expect(deadLetters).toEqual([
      expect.objectContaining({
        key: `PaymentsKafkaConsumer.paid@${TOPIC}/4/${second}@${SENT_AT}`,
        attempts: 0,
        error: expect.any(IdempotencyNotReplayableException),
      }),
    ]);
    expect(
      recorded.calls.map((call) =>
        call.call === 'commitOffsets' ? call.offsets[0].offset : call.call,
      ),
    ).toEqual([
      'eachMessage',
      String(Number(first) + 1),
      'eachMessage',
      String(Number(second) + 1),
    ]);
    expect(await orders()).toEqual(['statement-a']);
  });

  it('leaves a failed message to come back when the store does not answer its count of failed attempts: settled by the deadline, not held for as long as the store is silent', async () => {
    const at = next();
    // The count's statement waits for this lock for as long as it is held.
    const failures = await holdInTransaction(
      target.db.url,
      'LOCK TABLE idempotency_failures IN ACCESS EXCLUSIVE MODE',
    );
    let settled: boolean | 'never';
    let bound: NodeJS.Timeout | undefined;
    try {
      settled = await Promise.race([
        recorded.deliver(TOPIC, 6, {
          offset: at,
          value: { reference: 'uncounted', failures: 'always' },
        }),
        // Far past the route's deadline: without a bound on the count, the
        // delivery is still waiting then.
        new Promise<'never'>((resolve) => {
          bound = setTimeout(() => resolve('never'), 30_000);
        }),
      ]);
    } finally {
      clearTimeout(bound);
      await failures.release();
    }
    expect(settled).toBe(false);
    expect(recorded.calls.map((call) => call.call)).toEqual([
      'eachMessage',
      'failed',
    ]);
    expect(handlers.runs).toBe(1);
    expect(deadLetters).toEqual([]);
    expect(await orders()).toEqual([]);
    expect(await records()).toEqual([]);
  });

  it.each<[string, IHeaders, string]>([
    [
      'a malformed key header',
      { 'Idempotency-Key': 'not a key' },
      'it has an invalid format',
    ],
    // Read as no key, it would be keyed by its place in the log: a copy
    // produced again would run again.
    [
      'an empty key header',
      { 'Idempotency-Key': '' },
      'it must be 1 to 255 characters long',
    ],
    [
      'an empty key header of bytes',
      { 'Idempotency-Key': Buffer.alloc(0) },
      'it must be 1 to 255 characters long',
    ],
    [
      'a key header under two spellings of its name, as repeated',
      { 'Idempotency-Key': 'k-1', 'idempotency-key': 'k-2' },
      'it is repeated',
    ],
    [
      'a malformed quoted key header',
      { 'Idempotency-Key': '"k-1' },
      'it is not a valid quoted string',
    ],
  ])(
    'hands a message with %s to the dead-letter path at once, uncounted, then commits its offset',
    async (_what, headers, reason) => {
      const at = next();
      const done = await recorded.deliver(TOPIC, 5, {
        offset: at,
        value: { reference: 'bad-key' },
        headers,
      });
      expect(done).toBe(true);
      expect(handlers.runs).toBe(0);
      expect(deadLetters).toEqual([
        expect.objectContaining({
          scope: undefined,
          key: undefined,
          attempts: 0,
          data: { reference: 'bad-key' },
          error: expect.objectContaining({ status: 400 }),
        }),
      ]);
      expect(
        (deadLetters[0].error as IdempotencyHttpException).getProblem(),
      ).toMatchObject({
        type: 'urn:idempotency:invalid-key',
        detail: `The "Idempotency-Key" header is invalid: ${reason}.`,
      });
      expect(recorded.calls.map((call) => call.call)).toEqual([
        'eachMessage',
        'commitOffsets',
      ]);
      expect(
        await target.db.query('SELECT 1 FROM idempotency_failures'),
      ).toEqual([]);
    },
  );

  it('drops an event refused for good on a route with no deadLetter (the key of another message): its offset committed, the partition moving on', async () => {
    const logged = jest.spyOn(Logger.prototype, 'error');
    try {
      const headers = { 'Idempotency-Key': 'refund-1' };
      const first = next();
      const other = next();
      const after = next();
      await recorded.deliver(REFUNDS_TOPIC, 0, {
        offset: first,
        value: { reference: 'refund-1' },
        headers,
      });
      // Another event under that key: refused again at every delivery,
      // which kafkajs would make for ever, ahead of the partition's rest.
      const done = await recorded.deliver(
        REFUNDS_TOPIC,
        0,
        { offset: other, value: { reference: 'refund-2' }, headers },
        3,
      );
      expect(done).toBe(true);
      await recorded.deliver(REFUNDS_TOPIC, 0, {
        offset: after,
        value: { reference: 'refund-3' },
      });
      expect(handlers.runs).toBe(2);
      expect(await orders()).toEqual(['refund-1', 'refund-3']);
      expect(
        recorded.calls.map((call) =>
          call.call === 'commitOffsets' ? call.offsets[0].offset : call.call,
        ),
      ).toEqual([
        'eachMessage',
        String(Number(first) + 1),
        'eachMessage',
        String(Number(other) + 1),
        'eachMessage',
        String(Number(after) + 1),
      ]);
      expect(
        logged.mock.calls.filter(([text]) =>
          String(text).startsWith(
            `A message of ${REFUNDS_TOPIC} was refused for good and dropped`,
          ),
        ),
      ).toEqual([[expect.stringContaining('(422: ')]]);
    } finally {
      logged.mockRestore();
    }
  });

  it('counts failures across the consumer restarts that redeliver the message: the count is in the store, not the process', async () => {
    const at = next();
    const message = {
      offset: at,
      value: { reference: 'restarts', failures: 'always' as const },
    };
    // Two deliveries, then the consumer "restarts" (a rebalance): one more.
    expect(await recorded.deliver(TOPIC, 4, message, 2)).toBe(false);
    expect(deadLetters).toEqual([]);
    expect(await recorded.deliver(TOPIC, 4, message, 1)).toBe(true);
    expect(deadLetters.map((letter) => letter.attempts)).toEqual([3]);
  });
});

describe("a Kafka consumer of the Nest transport left to kafkajs's auto-commit (recorded kafkajs consumer)", () => {
  let target: TestApp;
  let recorded: RecordedConsumer;

  beforeAll(async () => {
    ({ target, recorded } = await startKafkaApp({}));
  });
  afterAll(() => target?.close());

  it('resolves the offset only after the records and the writes of both handlers of the topic committed, each handler running the message once: kafkajs commits it after them', async () => {
    await recorded.deliver(AUTO_TOPIC, 0, {
      offset: '5',
      value: { reference: 'ledger-1' },
    });
    await recorded.deliver(AUTO_TOPIC, 0, {
      offset: '5',
      value: { reference: 'ledger-1' },
    });
    const seen = {
      records: [
        {
          key: `AuditKafkaConsumer.audited@${AUTO_TOPIC}/0/5@${SENT_AT}`,
          status: 'completed',
        },
        {
          key: `LedgerKafkaConsumer.booked@${AUTO_TOPIC}/0/5@${SENT_AT}`,
          status: 'completed',
        },
      ],
      orders: [{ reference: 'audit:ledger-1' }, { reference: 'ledger-1' }],
    };
    expect(recorded.calls).toEqual([
      { call: 'eachMessage', offset: '5' },
      { call: 'autoCommit', offset: '6', seen },
      { call: 'eachMessage', offset: '5' },
      { call: 'autoCommit', offset: '6', seen },
    ]);
  });
});
