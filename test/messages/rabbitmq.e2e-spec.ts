import { Transport } from '@nestjs/microservices';
import amqp from 'amqplib';
import type {
  IdempotencyEvent,
  IdempotencyHttpException,
} from '../../src/index.js';
import { until } from '../utils/barrier.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import { describeWithBroker } from '../utils/broker.js';
import { UnprocessableEntityException } from '@nestjs/common';
import {
  DEADLOCK_PATTERN,
  Deliveries,
  HEADER_KEY_PATTERN,
  PATTERN,
  LARGE_PATTERN,
  POISON_PATTERN,
  QUEUE,
  RabbitTestModule,
  deadLetters,
  refusedKeys,
} from './rabbitmq.module.js';

const HOST = '127.0.0.1';
const PORT = 5672;
const URL = `amqp://guest:guest@${HOST}:${PORT}`;
const describeRabbit = await describeWithBroker('RabbitMQ', HOST, PORT);

describeRabbit(
  '@Idempotent() on a RabbitMQ consumer with manual acknowledgement',
  () => {
    let target: TestApp;
    let connection: amqp.ChannelModel;
    let channel: amqp.Channel;
    const events: IdempotencyEvent[] = [];

    beforeAll(async () => {
      target = await startTestApp({
        imports: [RabbitTestModule],
        idempotency: { onEvent: (event) => events.push(event) },
      });
      target.app.connectMicroservice(
        {
          transport: Transport.RMQ,
          options: {
            urls: [URL],
            queue: QUEUE,
            noAck: false,
            prefetchCount: 4,
            queueOptions: { durable: false, autoDelete: false },
          },
        },
        { inheritAppConfig: true },
      );
      await target.app.startAllMicroservices();
      connection = await amqp.connect(URL);
      channel = await connection.createChannel();
    });
    afterAll(async () => {
      await channel?.deleteQueue(QUEUE);
      await connection?.close();
      await target?.close();
    });

    /**
     * Publishes the message as Nest's RMQ transport reads it, with an AMQP
     * message id, or without one and a key header.
     */
    const publish = (
      messageId: string,
      reference: string,
      pattern = PATTERN,
      options: amqp.Options.Publish = { messageId },
    ) =>
      channel.sendToQueue(
        QUEUE,
        Buffer.from(JSON.stringify({ pattern, data: { reference } })),
        options,
      );
    const rows = async (reference: string) =>
      (
        await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
          reference,
        ])
      ).length;
    /** Messages neither acknowledged nor waiting: none once all are settled. */
    const settled = async () => {
      const { messageCount } = await channel.checkQueue(QUEUE);
      return messageCount === 0;
    };

    it('executes a message published five times once, and acknowledges every copy', async () => {
      for (let i = 0; i < 5; i += 1) {
        publish('msg-1', 'rmq-1');
      }
      await until(
        async () => events.filter((e) => e.key === 'msg-1').length === 5,
        'five deliveries',
      );
      await until(settled, 'the queue to drain');
      expect(
        events
          .filter((e) => e.key === 'msg-1')
          .map((e) => e.type)
          .sort(),
      ).toEqual(['executed', 'replayed', 'replayed', 'replayed', 'replayed']);
      expect(target.app.get(Deliveries).runs).toBe(1);
      expect(await rows('rmq-1')).toBe(1);
    });

    it('requeues a message whose handler failed: the redelivery executes once, nothing is lost', async () => {
      const deliveries = target.app.get(Deliveries);
      const before = deliveries.runs;
      deliveries.failOnce.add('rmq-2');
      publish('msg-2', 'rmq-2');
      await until(
        async () =>
          events.some((e) => e.key === 'msg-2' && e.type === 'executed'),
        'the redelivery',
      );
      await until(settled, 'the queue to drain');
      expect(deliveries.runs - before).toBe(2);
      expect(await rows('rmq-2')).toBe(1);
    });

    it('rejects a message whose handler refused it with a 4xx instead of redelivering it forever', async () => {
      const deliveries = target.app.get(Deliveries);
      const before = deliveries.runs;
      deliveries.invalid.add('rmq-bad');
      publish('msg-bad', 'rmq-bad');
      // Published after it: once this one is done, a requeued copy of the
      // refused message would have come back (RabbitMQ requeues at the head).
      publish('msg-after-bad', 'rmq-after-bad');
      await until(
        async () =>
          events.some(
            (e) => e.key === 'msg-after-bad' && e.type === 'executed',
          ),
        'the next message',
      );
      await until(settled, 'the queue to drain');
      expect(
        events.filter((e) => e.key === 'msg-bad').map((e) => e.type),
      ).toEqual(['failed']);
      expect(deliveries.runs - before).toBe(2);
      expect(await rows('rmq-bad')).toBe(0);
      expect(await rows('rmq-after-bad')).toBe(1);
    });

    it('takes the key from the key header of a message without a message id', async () => {
      const deliveries = target.app.get(Deliveries);
      const before = deliveries.runs;
      for (let i = 0; i < 3; i += 1) {
        publish('', 'rmq-header', PATTERN, {
          headers: { 'Idempotency-Key': 'hdr-1' },
        });
      }
      await until(
        async () => events.filter((e) => e.key === 'hdr-1').length === 3,
        'three deliveries',
      );
      await until(settled, 'the queue to drain');
      expect(deliveries.runs - before).toBe(1);
      expect(await rows('rmq-header')).toBe(1);
    });

    /**
     * Publishes copies of a message without a message id, with these key
     * headers, on the header-keyed route; resolves once each was run or
     * refused (handed to deadLetter).
     */
    const publishKeyed = async (
      reference: string,
      headers: Record<string, unknown>,
      copies: number,
    ) => {
      const deliveries = target.app.get(Deliveries);
      const before = deliveries.headerKeyedRuns + refusedKeys.length;
      for (let copy = 0; copy < copies; copy += 1) {
        publish('', reference, HEADER_KEY_PATTERN, { headers });
      }
      await until(
        async () =>
          deliveries.headerKeyedRuns + refusedKeys.length === before + copies,
        `${copies} deliveries of ${reference}`,
      );
      await until(settled, 'the queue to drain');
    };
    /** The problems of the messages refused since `from`. */
    const refusals = (from: number) =>
      refusedKeys
        .slice(from)
        .map((letter) =>
          (letter.error as IdempotencyHttpException).getProblem(),
        );

    it('refuses a message with an empty key header as an invalid key, as HTTP does, where no key is required: handed to deadLetter, never run', async () => {
      const deliveries = target.app.get(Deliveries);
      const [runs, refused] = [deliveries.headerKeyedRuns, refusedKeys.length];
      await publishKeyed('rmq-empty-key', { 'Idempotency-Key': '' }, 2);
      expect(refusals(refused)).toEqual(
        [1, 2].map(() =>
          expect.objectContaining({
            type: 'urn:idempotency:invalid-key',
            detail:
              'The "Idempotency-Key" header is invalid: it must be 1 to 255 characters long.',
          }),
        ),
      );
      expect(deliveries.headerKeyedRuns).toBe(runs);
      expect(await rows('rmq-empty-key')).toBe(0);
    });

    it.each<[string, Record<string, unknown>, string]>([
      [
        'sent under two spellings of its name, as repeated',
        { 'Idempotency-Key': 'rmq-k-1', 'idempotency-key': 'rmq-k-2' },
        'it is repeated',
      ],
      [
        'with a list of values, as repeated',
        { 'Idempotency-Key': ['rmq-k-3', 'rmq-k-4'] },
        'it is repeated',
      ],
      ['that is no text', { 'Idempotency-Key': 42 }, 'it is not a string'],
      [
        'quoted and malformed',
        { 'Idempotency-Key': '"rmq-k-5' },
        'it is not a valid quoted string',
      ],
    ])(
      'refuses a key header %s, as HTTP does: handed to deadLetter, never run',
      async (_what, headers, reason) => {
        const deliveries = target.app.get(Deliveries);
        const [runs, refused] = [
          deliveries.headerKeyedRuns,
          refusedKeys.length,
        ];
        await publishKeyed('rmq-bad-key', headers, 1);
        expect(refusals(refused)).toEqual([
          expect.objectContaining({
            type: 'urn:idempotency:invalid-key',
            detail: `The "Idempotency-Key" header is invalid: ${reason}.`,
          }),
        ]);
        expect(deliveries.headerKeyedRuns).toBe(runs);
        expect(await rows('rmq-bad-key')).toBe(0);
      },
    );

    it('reads a quoted key header as HTTP does: "rmq-q-1" and rmq-q-1 are one key', async () => {
      const deliveries = target.app.get(Deliveries);
      const [runs, refused] = [deliveries.headerKeyedRuns, refusedKeys.length];
      for (const key of ['"rmq-q-1"', 'rmq-q-1']) {
        publish('', 'rmq-quoted', HEADER_KEY_PATTERN, {
          headers: { 'Idempotency-Key': key },
        });
      }
      await until(
        async () => events.filter((e) => e.key === 'rmq-q-1').length === 2,
        'both copies',
      );
      await until(settled, 'the queue to drain');
      expect(
        events
          .filter((e) => e.key === 'rmq-q-1')
          .map((e) => e.type)
          .sort(),
      ).toEqual(['executed', 'replayed']);
      expect(deliveries.headerKeyedRuns - runs).toBe(1);
      expect(refusedKeys.length).toBe(refused);
      expect(await rows('rmq-quoted')).toBe(1);
    });

    it('hands a message that keeps failing to deadLetter after maxAttempts, and acknowledges it: nothing of it committed', async () => {
      publish('msg-poison', 'rmq-poison', POISON_PATTERN);
      publish('msg-after-poison', 'rmq-after-poison');
      await until(async () => deadLetters.length === 1, 'the dead letter');
      await until(
        async () =>
          events.some(
            (e) => e.key === 'msg-after-poison' && e.type === 'executed',
          ),
        'the next message',
      );
      await until(settled, 'the queue to drain');
      expect(deadLetters).toEqual([
        expect.objectContaining({
          key: 'msg-poison',
          pattern: POISON_PATTERN,
          data: { reference: 'rmq-poison' },
          attempts: 2,
          error: new Error('the ledger refuses it'),
        }),
      ]);
      expect(
        events.filter((e) => e.key === 'msg-poison').map((e) => e.type),
      ).toEqual(['failed', 'failed']);
      expect(await rows('rmq-poison')).toBe(0);
      // Handed over, its count is forgotten (after the hand-over, which the
      // queue's drain does not wait for): published again (its cause
      // fixed, or not, as here), it has its maxAttempts anew.
      await until(
        async () =>
          (
            await target.db.query(
              `SELECT failures FROM idempotency_failures WHERE key = 'msg-poison'`,
            )
          ).length === 0,
        'the count of failed attempts forgotten',
      );
      publish('msg-poison', 'rmq-poison', POISON_PATTERN);
      await until(async () => deadLetters.length === 2, 'the second letter');
      expect(deadLetters[1]).toMatchObject({ key: 'msg-poison', attempts: 2 });
      expect(
        events.filter((e) => e.key === 'msg-poison').map((e) => e.type),
      ).toEqual(['failed', 'failed', 'failed', 'failed']);
    });

    it('acknowledges the duplicate of a message processed already whose result was not stored, and never hands it to deadLetter', async () => {
      const deliveries = target.app.get(Deliveries);
      const before = deliveries.runs;
      const letters = deadLetters.length;
      publish('msg-large', 'rmq-large', LARGE_PATTERN);
      await until(
        async () =>
          events.some((e) => e.key === 'msg-large' && e.type === 'executed'),
        'the first delivery',
      );
      publish('msg-large', 'rmq-large', LARGE_PATTERN);
      await until(
        async () =>
          events.some(
            (e) => e.key === 'msg-large' && e.type === 'not-replayable',
          ),
        'the duplicate',
      );
      await until(settled, 'the queue to drain');
      expect(deliveries.runs - before).toBe(1);
      expect(await rows('rmq-large')).toBe(1);
      expect(deadLetters.slice(letters)).toEqual([]);
    });

    it.each<[string, string, Error]>([
      [
        'a 4xx',
        'rmq-deadlock-4xx',
        new UnprocessableEntityException('the stock is busy'),
      ],
      ['an error', 'rmq-deadlock-error', new Error('the booking failed')],
    ])(
      'requeues a message whose handler caught a deadlock of its statement and threw %s of its own: not counted, never handed to deadLetter, the redelivery commits once',
      async (_what, reference, answer) => {
        const deliveries = target.app.get(Deliveries);
        const before = deliveries.runs;
        const letters = deadLetters.length;
        const key = `msg-${reference}`;
        deliveries.deadlockOnce.set(reference, answer);
        publish(key, reference, DEADLOCK_PATTERN);
        await until(
          async () =>
            deadLetters.length > letters ||
            events.some((e) => e.key === key && e.type === 'executed'),
          'the redelivery',
        );
        await until(settled, 'the queue to drain');
        expect(
          deadLetters
            .slice(letters)
            .map((letter) => [letter.key, letter.attempts]),
        ).toEqual([]);
        expect(
          events.filter((e) => e.key === key).map((e) => [e.type, e.status]),
        ).toEqual([
          ['failed', 503],
          ['executed', 200],
        ]);
        expect(deliveries.runs - before).toBe(2);
        expect(await rows(reference)).toBe(1);
        expect(
          await target.db.query(
            'SELECT 1 FROM idempotency_failures WHERE key = $1',
            [key],
          ),
        ).toEqual([]);
      },
    );

    it('left no message unacknowledged: once the consumer is gone, nothing comes back to the queue', async () => {
      await target.close();
      const { messageCount, consumerCount } = await channel.checkQueue(QUEUE);
      expect({ messageCount, consumerCount }).toEqual({
        messageCount: 0,
        consumerCount: 0,
      });
    });
  },
);
