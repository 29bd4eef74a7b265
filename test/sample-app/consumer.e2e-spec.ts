import { randomUUID } from 'node:crypto';
import amqp from 'amqplib';
import { describeWithBroker } from '../utils/broker.js';
import { until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { lockWaiters } from '../utils/sessions.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

const HOST = '127.0.0.1';
const PORT = 5672;
const URL = `amqp://guest:guest@${HOST}:${PORT}`;
const describeRabbit = await describeWithBroker('RabbitMQ', HOST, PORT);

describeRabbit(
  'the sample RabbitMQ consumer, as real processes killed with SIGKILL',
  () => {
    let db: TestDatabase;
    let gateway: FakeGateway;
    let connection: amqp.ChannelModel;
    let channel: amqp.Channel;
    const consumers = new Set<SampleProcess>();
    /** A queue of this test only. */
    let queue = '';
    let published = 0;

    beforeAll(async () => {
      db = await createTestDatabase();
      gateway = await new FakeGateway().start();
      connection = await amqp.connect(URL);
      channel = await connection.createChannel();
    });
    beforeEach(() => {
      queue = `payments-${randomUUID().slice(0, 8)}`;
    });
    afterEach(async () => {
      await Promise.all([...consumers].map((consumer) => consumer.stop()));
      consumers.clear();
      await channel.deleteQueue(queue);
    });
    afterAll(async () => {
      await connection?.close();
      await gateway?.stop();
      await db?.drop();
    });

    /** Runs the sample consumer (`node dist-sample/consumer.js`) on this test's queue. */
    const startConsumer = async (env: Record<string, string> = {}) => {
      const consumer = await startSample(
        {
          DATABASE_URL: db.url,
          GATEWAY_URL: gateway.url,
          RABBITMQ_URL: URL,
          PAYMENTS_QUEUE: queue,
          ...env,
        },
        {
          // The sample has no fault hook: a consumer that kills itself after
          // a commit is a test-only entry around the sample's modules.
          entry:
            env.SAMPLE_KILL_AFTER_COMMIT === undefined
              ? 'consumer.js'
              : '../test/utils/killing-consumer.js',
          ready: /Payments consumer listening on queue (\S+)/,
        },
      );
      consumers.add(consumer);
      return consumer;
    };
    const kill = async (consumer: SampleProcess) => {
      expect(await consumer.stop('SIGKILL')).toEqual({
        code: null,
        signal: 'SIGKILL',
      });
      consumers.delete(consumer);
    };
    /** Publishes one copy of the payment request `key`, as a producer would. */
    const publish = (key: string, merchantId: string) => {
      published += 1;
      channel.sendToQueue(
        queue,
        Buffer.from(
          JSON.stringify({
            pattern: 'payment.requested',
            data: { amount: 1500, currency: 'EUR', merchantId },
          }),
        ),
        { messageId: key, persistent: true },
      );
    };
    /** Payments of each merchant (one merchant per logical message here). */
    const payments = async (merchantId: string) =>
      (
        await db.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM payments WHERE merchant_id = $1',
          [merchantId],
        )
      )[0].n;
    const ready = async () => (await channel.checkQueue(queue)).messageCount;
    const recordStatus = async (key: string) =>
      (
        await db.query<{ status: string }>(
          'SELECT status FROM idempotency_records WHERE key = $1',
          [key],
        )
      ).map((row) => row.status);
    /**
     * Stops every consumer (SIGTERM) and takes what is left in the queue: a
     * copy a consumer had received but not yet acknowledged when it stopped
     * comes back. Each must be a duplicate of a completed message, so that
     * no logical message is lost. Returns their keys.
     */
    const drainLeftovers = async () => {
      await Promise.all([...consumers].map((consumer) => consumer.stop()));
      consumers.clear();
      const left: string[] = [];
      for (;;) {
        const message = await channel.get(queue, { noAck: true });
        if (message === false) {
          return left;
        }
        left.push(String(message.properties.messageId));
        expect(await recordStatus(left.at(-1)!)).toEqual(['completed']);
      }
    };
    /**
     * Starts a consumer that takes one message at a time, and waits until it
     * has settled every message now in the queue: a marker published after
     * them is processed last, so once the marker's payment exists, every
     * copy before it was acknowledged (or it would have blocked the marker).
     */
    const drainWithOneConsumer = async () => {
      await startConsumer({ PREFETCH: '1' });
      const marker = `marker-${randomUUID()}`;
      publish(marker, marker);
      await until(async () => (await payments(marker)) === 1, 'the marker');
      const left = await drainLeftovers();
      // Only the marker can be left: its acknowledgement follows its commit.
      expect(left.filter((key) => key !== marker)).toEqual([]);
    };

    it('killed in the middle of the handler: nothing is written, and the redelivery executes once', async () => {
      const key = `crash-mid-${randomUUID()}`;
      const merchant = 'm_mid';
      const first = await startConsumer();
      // Holds the handler after its charge step, before its payment insert.
      const holder = await holdInTransaction(
        db.url,
        'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
      );
      for (let i = 0; i < 3; i += 1) {
        publish(key, merchant);
      }
      await until(
        async () => (await lockWaiters(db, 'payments')).length === 1,
        'the handler to wait on the payments table',
      );
      // Charged, with the derived key of the request.
      const derived = await derivedKeyOf(db, key);
      expect(gateway.calls.get(derived)).toBe(1);
      await kill(first);
      await holder.release();
      expect(await payments(merchant)).toBe(0);
      // The dead consumer's claim stays: the next consumer takes it over at
      // once, its instance's presence lock having gone with its session.
      expect(await recordStatus(key)).toEqual(['in_progress']);
      await until(
        async () =>
          (
            await db.query(
              `SELECT 1 FROM pg_stat_activity
               WHERE datname = current_database() AND application_name = 'idempotency-presence'`,
            )
          ).length === 0,
        'the presence session of the killed consumer to end',
      );

      await drainWithOneConsumer();
      expect(await payments(merchant)).toBe(1);
      // The takeover kept the key's generation: the same derived key, whose
      // charge the step kept.
      expect(await derivedKeyOf(db, key)).toBe(derived);
      expect(gateway.calls.get(derived)).toBe(1);
      expect(await recordStatus(key)).toEqual(['completed']);
      console.log(
        `consumer killed mid-handler: 3 copies published, payments=${await payments(merchant)}, gateway calls=${gateway.calls.get(derived)}`,
      );
    });

    it('killed after its commit, before its acknowledgement: the redelivery is acknowledged without a second execution', async () => {
      const key = `crash-ack-${randomUUID()}`;
      const merchant = 'm_ack';
      const first = await startConsumer({ SAMPLE_KILL_AFTER_COMMIT: key });
      for (let i = 0; i < 3; i += 1) {
        publish(key, merchant);
      }
      // The consumer kills itself right after the commit of this key.
      expect(await first.exited()).toEqual({
        code: null,
        signal: 'SIGKILL',
      });
      consumers.delete(first);
      expect(await payments(merchant)).toBe(1);
      expect(await recordStatus(key)).toEqual(['completed']);
      // Nothing was acknowledged: all three copies come back to the queue.
      await until(async () => (await ready()) === 3, 'three copies back');

      await drainWithOneConsumer();
      expect(await payments(merchant)).toBe(1);
      const derived = await derivedKeyOf(db, key);
      expect(gateway.calls.get(derived)).toBe(1);
      console.log(
        `consumer killed after commit: 3 copies published, 3 redelivered, payments=${await payments(merchant)}, gateway calls=${gateway.calls.get(derived)}`,
      );
    });

    it('two consumers on one queue, one of them killed under load: every logical message is paid exactly once, none is lost', async () => {
      const MESSAGES = 100;
      const COPIES = 3;
      const keys = Array.from(
        { length: MESSAGES },
        (_, i) => [`load-${i}-${randomUUID()}`, `m_load_${i}`] as const,
      );
      const consumerA = await startConsumer();
      await startConsumer();
      const before = published;
      // Copies arrive interleaved: key 0..99, then again, then again.
      for (let copy = 0; copy < COPIES; copy += 1) {
        for (const [key, merchant] of keys) {
          publish(key, merchant);
        }
      }
      const total = async () =>
        (
          await db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM payments WHERE merchant_id LIKE 'm_load_%'`,
          )
        )[0].n;
      await until(async () => (await total()) >= MESSAGES / 4, 'some payments');
      await kill(consumerA);
      const paidAtKill = await total();
      await startConsumer();
      await until(
        async () => (await total()) === MESSAGES,
        'every payment',
        60_000,
      );
      await until(async () => (await ready()) === 0, 'the queue to drain');
      const left = await drainLeftovers();

      const perMerchant = await db.query<{ merchant_id: string; n: number }>(
        `SELECT merchant_id, count(*)::int AS n FROM payments
         WHERE merchant_id LIKE 'm_load_%' GROUP BY merchant_id`,
      );
      expect(perMerchant).toHaveLength(MESSAGES);
      expect(perMerchant.every((row) => row.n === 1)).toBe(true);
      // A consumer killed between a gateway call and the commit of its step
      // makes the redelivery call the gateway again, with the same derived
      // key: the gateway charges once. Every payment has its own charge.
      const calls: (number | undefined)[] = [];
      for (const [key] of keys) {
        calls.push(gateway.calls.get(await derivedKeyOf(db, key)));
      }
      expect(calls.every((n) => n === 1 || n === 2)).toBe(true);
      const [{ charges }] = await db.query<{ charges: number }>(
        `SELECT count(DISTINCT charge_id)::int AS charges FROM payments
         WHERE merchant_id LIKE 'm_load_%'`,
      );
      expect(charges).toBe(MESSAGES);
      const [{ completed }] = await db.query<{ completed: number }>(
        `SELECT count(*)::int AS completed FROM idempotency_records
         WHERE key LIKE 'load-%' AND status = 'completed'`,
      );
      expect(completed).toBe(MESSAGES);
      console.log(
        `two consumers, one SIGKILLed after ${paidAtKill} payments: ${published - before} messages published for ${MESSAGES} logical messages, payments=${await total()}, distinct charges=${charges}, gateway calls repeated after the kill=${calls.filter((n) => n === 2).length}, duplicate copies left unacknowledged by the stopped consumers=${left.length}`,
      );
    });
  },
);
