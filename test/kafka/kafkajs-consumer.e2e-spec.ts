import { jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EachMessagePayload, IHeaders } from 'kafkajs';
import type { EntityManager } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyContext,
  IdempotencyDownstreamRefusedException,
  IdempotencyDownstreamUnavailableException,
  IdempotencyKafka,
  IdempotencyNotReplayableException,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyDeadLetter,
  type IdempotencyEvent,
  type IdempotencyHttpException,
  type IdempotentKafkaOptions,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import {
  recordedKafka,
  SENT_AT,
  type RecordedConsumer,
} from './recorded-kafka.js';

const TOPIC = 'invoices';

describe('IdempotencyKafka.eachMessage() in a kafkajs consumer (recorded, no broker)', () => {
  let target: TestApp;
  let idempotency: IdempotencyKafka;
  const deadLetters: IdempotencyDeadLetter[] = [];
  const events: IdempotencyEvent[] = [];
  let runs = 0;

  /** Pays an invoice in the message's transaction; `poison` always fails. */
  const pay = async (
    { message }: EachMessagePayload,
    manager: EntityManager,
  ): Promise<void> => {
    runs += 1;
    const { reference } = JSON.parse(message.value!.toString()) as {
      reference: string;
    };
    await manager.insert(Order, { reference, source: 'kafkajs' });
    if (reference.startsWith('poison')) {
      throw new Error(`cannot pay ${reference}`);
    }
  };

  /**
   * A consumer run as the README shows it, on the recorded kafkajs
   * consumer, its handler `handler` (`pay` by default).
   */
  const consumerOf = async (
    options: Omit<IdempotentKafkaOptions, 'consumer'> & {
      autoCommit?: boolean;
    },
    handler: typeof pay = pay,
  ): Promise<RecordedConsumer> => {
    const { kafka, recorded } = recordedKafka(options.scope);
    const consumer = kafka.consumer({ groupId: options.scope });
    const { autoCommit = false, ...wrapped } = options;
    await consumer.run({
      autoCommit,
      eachMessage: idempotency.eachMessage(handler, {
        ...wrapped,
        consumer: autoCommit ? undefined : consumer,
      }),
    });
    recorded.onCommit = async () =>
      (
        await target.db.query<{ reference: string; status: string | null }>(
          `SELECT o.reference, r.status FROM orders o
           LEFT JOIN idempotency_records r ON r.scope = $1
           WHERE o.source = 'kafkajs' ORDER BY o.id`,
          [options.scope],
        )
      ).map((row) => `${row.reference}:${row.status}`);
    return recorded;
  };

  beforeAll(async () => {
    target = await startTestApp({
      idempotency: { onEvent: (event) => events.push(event) },
    });
    idempotency = target.app.get(IdempotencyKafka);
  });
  afterAll(() => target?.close());
  beforeEach(async () => {
    runs = 0;
    deadLetters.length = 0;
    events.length = 0;
    await target.db.query(
      'TRUNCATE orders, idempotency_records, idempotency_failures',
    );
  });

  const orders = async () =>
    (
      await target.db.query<{ reference: string }>(
        'SELECT reference FROM orders ORDER BY id',
      )
    ).map((row) => row.reference);

  it('refuses an empty scope when it wraps the handler, before any message', () => {
    expect(() => idempotency.eachMessage(pay, { scope: '' })).toThrow(
      IdempotencyConfigurationError,
    );
  });

  it('runs a message once per key: topic/partition/offset, or the key header', async () => {
    const recorded = await consumerOf({ scope: 'billing' });
    await recorded.deliver(TOPIC, 0, {
      offset: '7',
      value: { reference: 'i-1' },
    });
    await recorded.deliver(TOPIC, 0, {
      offset: '7',
      value: { reference: 'i-1' },
    });
    const headers = { 'idempotency-key': 'invoice-2' };
    await recorded.deliver(TOPIC, 0, {
      offset: '8',
      value: { reference: 'i-2' },
      headers,
    });
    await recorded.deliver(TOPIC, 1, {
      offset: '3',
      value: { reference: 'i-2' },
      headers,
    });
    expect(runs).toBe(2);
    expect(await orders()).toEqual(['i-1', 'i-2']);
    expect(
      await target.db.query(
        'SELECT scope, key, status FROM idempotency_records ORDER BY key',
      ),
    ).toEqual([
      { scope: 'billing', key: 'invoice-2', status: 'completed' },
      { scope: 'billing', key: `${TOPIC}/0/7@${SENT_AT}`, status: 'completed' },
    ]);
  });

  it('reads a quoted key header as HTTP does: "invoice-8" and invoice-8 are one key', async () => {
    const recorded = await consumerOf({ scope: 'billing' });
    for (const [offset, key] of [
      ['30', '"invoice-8"'],
      ['31', 'invoice-8'],
    ]) {
      await recorded.deliver(TOPIC, 0, {
        offset,
        value: { reference: 'i-8' },
        headers: { 'Idempotency-Key': key },
      });
    }
    expect(runs).toBe(1);
    expect(await orders()).toEqual(['i-8']);
    expect(
      await target.db.query('SELECT key FROM idempotency_records'),
    ).toEqual([{ key: 'invoice-8' }]);
  });

  it("keys a message without a key header by its place in the log, which the clients' key rules do not apply to: it runs once", async () => {
    // A topic name of 248 characters (Kafka takes 249): its place is
    // longer than the default rules' 255 characters.
    const topic = `t${'o'.repeat(247)}`;
    const recorded = await consumerOf({ scope: 'receipts' });
    for (let delivery = 0; delivery < 2; delivery += 1) {
      await recorded.deliver(topic, 0, {
        offset: '11',
        value: { reference: 'r-1' },
      });
    }
    expect(runs).toBe(1);
    expect(await orders()).toEqual(['r-1']);
    expect(
      await target.db.query('SELECT key, status FROM idempotency_records'),
    ).toEqual([{ key: `${topic}/0/11@${SENT_AT}`, status: 'completed' }]);
  });

  it('commits each offset with the consumer only after the record and the writes committed', async () => {
    const recorded = await consumerOf({ scope: 'billing' });
    await recorded.deliver(TOPIC, 0, {
      offset: '9',
      value: { reference: 'i-3' },
    });
    expect(recorded.calls).toEqual([
      { call: 'eachMessage', offset: '9' },
      {
        call: 'commitOffsets',
        offsets: [{ topic: TOPIC, partition: 0, offset: '10' }],
        seen: ['i-3:completed'],
      },
    ]);
  });

  it("leaves the commit to kafkajs's auto-commit without a consumer: eachMessage resolves after the record", async () => {
    const recorded = await consumerOf({ scope: 'auto', autoCommit: true });
    await recorded.deliver(TOPIC, 0, {
      offset: '4',
      value: { reference: 'i-4' },
    });
    expect(recorded.calls).toEqual([
      { call: 'eachMessage', offset: '4' },
      { call: 'autoCommit', offset: '5', seen: ['i-4:completed'] },
    ]);
  });

  it('keeps the consumer groups apart by scope: each runs the same message once', async () => {
    const billing = await consumerOf({ scope: 'billing' });
    const audit = await consumerOf({ scope: 'audit' });
    for (const group of [billing, audit, billing]) {
      await group.deliver(TOPIC, 0, {
        offset: '11',
        value: { reference: 'i-5' },
      });
    }
    expect(runs).toBe(2);
    expect(await orders()).toEqual(['i-5', 'i-5']);
  });

  it('hands a poison message to deadLetter after maxAttempts, rolled back each time, then commits its offset', async () => {
    const recorded = await consumerOf({
      scope: 'billing',
      maxAttempts: 2,
      deadLetter: (letter) => {
        deadLetters.push(letter);
      },
    });
    expect(
      await recorded.deliver(
        TOPIC,
        5,
        { offset: '12', value: { reference: 'poison-1' } },
        5,
      ),
    ).toBe(true);
    expect(recorded.calls.map((call) => call.call)).toEqual([
      'eachMessage',
      'failed',
      'eachMessage',
      'commitOffsets',
    ]);
    expect(deadLetters).toEqual([
      {
        scope: 'billing',
        key: `${TOPIC}/5/12@${SENT_AT}`,
        pattern: TOPIC,
        data: Buffer.from(JSON.stringify({ reference: 'poison-1' })),
        error: new Error('cannot pay poison-1'),
        attempts: 2,
        context: expect.objectContaining({ topic: TOPIC, partition: 5 }),
      },
    ]);
    expect(await orders()).toEqual([]);
    // Each failure is reported, as a transport's is.
    expect(
      events
        .filter((event) => event.type === 'failed')
        .map(({ key, error }) => [key, (error as Error).message]),
    ).toEqual([
      [`${TOPIC}/5/12@${SENT_AT}`, 'cannot pay poison-1'],
      [`${TOPIC}/5/12@${SENT_AT}`, 'cannot pay poison-1'],
    ]);
  });

  it('delivers again, uncounted, a message whose handler caught a deadlock of its own statement and threw its own error: never handed to deadLetter for a failure a retry may not meet', async () => {
    let deadlocked = false;
    const recorded = await consumerOf(
      {
        scope: 'deadlocks',
        maxAttempts: 1,
        deadLetter: (letter) => {
          deadLetters.push(letter);
        },
      },
      async (payload, manager) => {
        if (deadlocked) {
          return pay(payload, manager);
        }
        deadlocked = true;
        runs += 1;
        await manager.insert(Order, { reference: 'lost', source: 'kafkajs' });
        try {
          await manager.query(
            "DO $$ BEGIN RAISE EXCEPTION 'a deadlock' USING ERRCODE = '40P01'; END $$",
          );
        } catch {
          throw new Error('the payment could not be booked');
        }
      },
    );
    expect(
      await recorded.deliver(
        TOPIC,
        2,
        { offset: '7', value: { reference: 'deadlocked-1' } },
        3,
      ),
    ).toBe(true);
    expect(recorded.calls.map((call) => call.call)).toEqual([
      'eachMessage',
      'failed',
      'eachMessage',
      'commitOffsets',
    ]);
    expect(deadLetters).toEqual([]);
    expect(runs).toBe(2);
    expect(await orders()).toEqual(['deadlocked-1']);
  });

  it.each([
    [
      'refuses it (a 400: downstream-refused)',
      400,
      IdempotencyDownstreamRefusedException,
    ],
    [
      'is down (a 503: downstream-unavailable)',
      503,
      IdempotencyDownstreamUnavailableException,
    ],
  ])(
    'counts the failures of a handler whose outgoing call %s, and hands the message to deadLetter after maxAttempts: the partition moves on',
    async (_what, status, thrown) => {
      const downstream = createServer((_request, response) => {
        response.statusCode = status;
        response.end('no');
      });
      await new Promise<void>((listening) =>
        downstream.listen(0, '127.0.0.1', listening),
      );
      try {
        const { port } = downstream.address() as AddressInfo;
        const idempotencyContext = target.app.get(IdempotencyContext);
        const { kafka, recorded } = recordedKafka('ledger');
        const consumer = kafka.consumer({ groupId: 'ledger' });
        await consumer.run({
          autoCommit: false,
          eachMessage: idempotency.eachMessage(
            async ({ message }, manager: EntityManager) => {
              runs += 1;
              await manager.insert(Order, {
                reference: String(message.value),
                source: 'kafkajs',
              });
              await idempotencyContext.fetch(
                'ledger',
                `http://127.0.0.1:${port}/entries`,
                {
                  method: 'POST',
                  body: 'entry',
                  idempotency: { retry: { attempts: 1 } },
                },
              );
            },
            {
              scope: 'ledger',
              consumer,
              maxAttempts: 2,
              deadLetter: (letter) => {
                deadLetters.push(letter);
              },
            },
          ),
        });
        // Before the fix the module took the downstream's exception for a
        // refusal of its own: never counted, the message came back for ever.
        expect(
          await recorded.deliver(
            TOPIC,
            9,
            { offset: '40', value: { reference: 'l-1' } },
            4,
          ),
        ).toBe(true);
        expect(runs).toBe(2);
        expect(recorded.calls.map((call) => call.call)).toEqual([
          'eachMessage',
          'failed',
          'eachMessage',
          'commitOffsets',
        ]);
        expect(deadLetters).toEqual([
          expect.objectContaining({
            key: `${TOPIC}/9/40@${SENT_AT}`,
            attempts: 2,
            error: expect.any(thrown),
          }),
        ]);
        expect(await orders()).toEqual([]);
      } finally {
        downstream.close();
      }
    },
  );

  it('hands to deadLetter a message whose handler threw the refusal of a nested run() whose result was not stored: failed, its write rolled back, never acknowledged as a duplicate of its own', async () => {
    const service = target.app.get(IdempotencyService);
    const { kafka, recorded } = recordedKafka('statements');
    const consumer = kafka.consumer({ groupId: 'statements' });
    await consumer.run({
      autoCommit: false,
      eachMessage: idempotency.eachMessage(
        async ({ message }, manager: EntityManager) => {
          runs += 1;
          await manager.insert(Order, {
            reference: String(message.value),
            source: 'kafkajs',
          });
          // A result over maxResponseSize (1 MiB): not stored, its key's
          // next run() refused as not replayable.
          await service.run({ key: 'statement-1', scope: 'statements' }, () =>
            Promise.resolve('x'.repeat(1_100_000)),
          );
        },
        {
          scope: 'statements',
          consumer,
          maxAttempts: 3,
          deadLetter: (letter) => {
            deadLetters.push(letter);
          },
        },
      ),
    });
    await recorded.deliver(TOPIC, 3, { offset: '50', value: 's-1' });
    await recorded.deliver(TOPIC, 3, { offset: '51', value: 's-2' });
    expect(runs).toBe(2);
    // Before the fix the second one was acknowledged as a duplicate whose
    // result was not stored: its offset committed, nothing handed over,
    // nothing logged, and its write lost.
    expect(deadLetters).toEqual([
      expect.objectContaining({
        key: `${TOPIC}/3/51@${SENT_AT}`,
        attempts: 0,
        error: expect.any(IdempotencyNotReplayableException),
      }),
    ]);
    expect(await orders()).toEqual(['"s-1"']);
    expect(
      await target.db.query(
        `SELECT key, status FROM idempotency_records WHERE scope = 'statements' ORDER BY key`,
      ),
    ).toEqual([
      { key: `${TOPIC}/3/50@${SENT_AT}`, status: 'completed' },
      { key: 'statement-1', status: 'not_replayable' },
    ]);
  });

  it.each<[string, IHeaders, string]>([
    [
      'a key header too long',
      { 'Idempotency-Key': 'x'.repeat(300) },
      'it must be 1 to 255 characters long',
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
    // kafkajs gives the values of a header sent twice as a list.
    [
      'a key header sent twice, as repeated',
      { 'Idempotency-Key': ['invoice-6', 'invoice-6'] },
      'it is repeated',
    ],
    [
      'a key header under two spellings of its name, as repeated',
      { 'Idempotency-Key': 'invoice-6', 'idempotency-key': 'invoice-7' },
      'it is repeated',
    ],
  ])(
    'hands a message with %s to deadLetter at once, running nothing',
    async (_what, headers, reason) => {
      const recorded = await consumerOf({
        scope: 'billing',
        maxAttempts: 3,
        deadLetter: (letter) => {
          deadLetters.push(letter);
        },
      });
      await recorded.deliver(TOPIC, 7, {
        offset: '14',
        value: { reference: 'i-6' },
        headers,
      });
      expect(runs).toBe(0);
      expect(deadLetters).toEqual([
        expect.objectContaining({ key: undefined, attempts: 0 }),
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
    },
  );

  it.each([
    ['the key of another message', 'invoice-9', 422],
    ['a malformed key header', 'not a key', 400],
  ])(
    'drops a message with %s when the consumer has no deadLetter: its offset committed, the refusal logged, the partition moving on',
    async (_what, key, status) => {
      const logged = jest.spyOn(Logger.prototype, 'error');
      try {
        const recorded = await consumerOf({ scope: 'billing' });
        const headers = { 'Idempotency-Key': 'invoice-9' };
        await recorded.deliver(TOPIC, 8, {
          offset: '20',
          value: { reference: 'i-9' },
          headers,
        });
        // Another message under that key, or a key refused as such: it can
        // only be refused again. kafkajs would deliver it for ever.
        const done = await recorded.deliver(
          TOPIC,
          8,
          {
            offset: '21',
            value: { reference: 'i-10' },
            headers: { 'Idempotency-Key': key },
          },
          3,
        );
        expect(done).toBe(true);
        expect(runs).toBe(1);
        expect(
          recorded.calls.map((call) =>
            call.call === 'commitOffsets' ? call.offsets : call.call,
          ),
        ).toEqual([
          'eachMessage',
          [{ topic: TOPIC, partition: 8, offset: '21' }],
          'eachMessage',
          [{ topic: TOPIC, partition: 8, offset: '22' }],
        ]);
        expect(await orders()).toEqual(['i-9']);
        expect(
          logged.mock.calls.filter(([text]) =>
            String(text).includes(
              `A message of ${TOPIC} was refused for good and dropped`,
            ),
          ),
        ).toEqual([[expect.stringContaining(`(${status}: `)]]);
      } finally {
        logged.mockRestore();
      }
    },
  );

  it('delivers a poison message again, offset uncommitted, when deadLetter fails; hands it over at the next delivery', async () => {
    let refuse = true;
    const recorded = await consumerOf({
      scope: 'billing',
      maxAttempts: 1,
      deadLetter: (letter) => {
        if (refuse) {
          refuse = false;
          throw new Error('the dead-letter topic is unreachable');
        }
        deadLetters.push(letter);
      },
    });
    await recorded.deliver(
      TOPIC,
      6,
      { offset: '13', value: { reference: 'poison-2' } },
      2,
    );
    expect(recorded.calls.map((call) => call.call)).toEqual([
      'eachMessage',
      'failed',
      'eachMessage',
      'commitOffsets',
    ]);
    expect(deadLetters.map((letter) => letter.attempts)).toEqual([2]);
  });
});

describe('IdempotencyKafka.eachMessage() on a store outside the database (memory)', () => {
  let target: StoreApp;
  const effects: string[] = [];
  const deadLetters: IdempotencyDeadLetter[] = [];

  beforeAll(async () => {
    target = await startStoreApp({ store: new MemoryIdempotencyStore() });
  });
  afterAll(() => target?.close());

  it('skips duplicates and dead-letters a poison message after maxAttempts, counted by the store; the handler gets no transaction', async () => {
    const { kafka, recorded } = recordedKafka('memory');
    const consumer = kafka.consumer({ groupId: 'memory' });
    const managers: unknown[] = [];
    await consumer.run({
      autoCommit: false,
      eachMessage: target.app.get(IdempotencyKafka).eachMessage(
        async ({ message }, manager) => {
          managers.push(manager);
          const reference = String(message.value);
          effects.push(reference);
          if (reference.includes('poison')) {
            throw new Error('refused');
          }
          return Promise.resolve();
        },
        {
          scope: 'memory',
          consumer,
          maxAttempts: 3,
          deadLetter: (letter) => {
            deadLetters.push(letter);
          },
        },
      ),
    });
    await recorded.deliver(TOPIC, 0, { offset: '1', value: 'mail-1' });
    await recorded.deliver(TOPIC, 0, { offset: '1', value: 'mail-1' });
    await recorded.deliver(TOPIC, 0, { offset: '2', value: 'poison' }, 5);
    expect(effects).toEqual(['"mail-1"', '"poison"', '"poison"', '"poison"']);
    expect(managers).toEqual([undefined, undefined, undefined, undefined]);
    expect(deadLetters.map((letter) => letter.attempts)).toEqual([3]);
    expect(
      recorded.calls
        .filter((call) => call.call === 'commitOffsets')
        .map((call) => call.offsets[0].offset),
    ).toEqual(['2', '2', '3']);
  });
});
