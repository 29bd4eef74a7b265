import { BullModule } from '@nestjs/bullmq';
import type { ModuleMetadata } from '@nestjs/common';
import {
  ClientProxyFactory,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import amqp from 'amqplib';
import { Queue, QueueEvents, type JobsOptions } from 'bullmq';
import { lastValueFrom } from 'rxjs';
import type { IdempotencyEvent } from '../../src/index.js';
import { SUBJECTS } from '../messages/nats.handlers.js';
import { until } from '../utils/barrier.js';
import { describeWithBroker } from '../utils/broker.js';
import { watchClaims, type ClaimWatch } from '../utils/claims.js';
import { describeWithServer } from '../utils/server.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import {
  dynamoSubject,
  memorySubject,
  REDIS,
  redisSubject,
  valkeySubject,
  type Subject,
} from '../utils/store-subjects.js';
import { describeWithValkeyServer } from '../utils/redis-server.js';
import {
  CapturesConsumer,
  ChargesProcessor,
  Effects,
  JOBS_QUEUE,
  type ChargeJob,
  PATTERN,
  PaymentsConsumer,
  nameOf,
} from './messages.module.js';

const RABBIT = { host: '127.0.0.1', port: 5672 };
const RABBIT_URL = `amqp://guest:guest@${RABBIT.host}:${RABBIT.port}`;
const NATS = { host: '127.0.0.1', port: 4222 };
const NATS_SERVERS = [`nats://${NATS.host}:${NATS.port}`];

const describeRabbit = await describeWithBroker(
  'RabbitMQ',
  RABBIT.host,
  RABBIT.port,
);
const describeNats = await describeWithBroker('NATS', NATS.host, NATS.port);
const describeRedis = await describeWithServer('Redis', REDIS.host, REDIS.port);

/** `describe` where both servers are reachable, else the skip of the first that is not. */
const where = (first: jest.Describe, second: jest.Describe) =>
  first === describe ? second : first;

/** A consumer application on a store, without TypeORM, and what it did. */
interface Consumer {
  readonly target: StoreApp;
  readonly subject: Subject;
  readonly effects: Effects;
  readonly claims: ClaimWatch;
  /** The module's events, in order. */
  readonly events: IdempotencyEvent[];
  /** Closes the application (once). */
  close(): Promise<void>;
}

/**
 * Starts, for the tests of the enclosing `describe`, an application on the
 * store of `subjectOf` with `metadata` (its consumers), connected to
 * `microservice` if given.
 */
function consumerOnStore(
  subjectOf: () => Promise<Subject>,
  metadata: ModuleMetadata,
  microservice?: MicroserviceOptions,
): Consumer {
  const events: IdempotencyEvent[] = [];
  let closing: Promise<void> | undefined;
  const consumer = {
    events,
    close: () => (closing ??= consumer.target.close()),
  } as { -readonly [K in keyof Consumer]: Consumer[K] };
  beforeAll(async () => {
    consumer.subject = await subjectOf();
    consumer.target = await startStoreApp({
      ...metadata,
      store: consumer.subject.store,
      providers: [Effects, ...(metadata.providers ?? [])],
      idempotency: { onEvent: (event) => events.push(event) },
    });
    if (microservice) {
      // A hybrid application shares its global interceptors with a
      // microservice only with inheritAppConfig.
      consumer.target.app.connectMicroservice(microservice, {
        inheritAppConfig: true,
      });
      await consumer.target.app.startAllMicroservices();
    }
    consumer.effects = consumer.target.app.get(Effects);
    consumer.claims = watchClaims(consumer.target.app);
  });
  afterAll(async () => {
    if (consumer.target) {
      await consumer.close();
    }
    await consumer.subject?.close();
  });
  beforeEach(() => {
    consumer.effects.reset();
    events.length = 0;
  });
  return consumer;
}

/** The types of the events of `key`, in order. */
const typesOf = (events: readonly IdempotencyEvent[], key: string) =>
  events.filter((event) => event.key === key).map((event) => event.type);

/**
 * A RabbitMQ consumer with manual acknowledgement: every copy of a message
 * is settled, and its side effect is made once.
 */
function rabbitOnStore(store: string, subjectOf: () => Promise<Subject>) {
  const queue = nameOf(store);
  const consumer = consumerOnStore(
    subjectOf,
    { controllers: [CapturesConsumer] },
    {
      transport: Transport.RMQ,
      options: {
        urls: [RABBIT_URL],
        queue,
        noAck: false,
        prefetchCount: 4,
        queueOptions: { durable: false, autoDelete: false },
      },
    },
  );
  let connection: amqp.ChannelModel;
  let channel: amqp.Channel;

  beforeAll(async () => {
    connection = await amqp.connect(RABBIT_URL);
    channel = await connection.createChannel();
  });
  afterAll(async () => {
    await channel?.deleteQueue(queue);
    await connection?.close();
  });

  /** Publishes the message as Nest's RMQ transport reads it, with an AMQP message id. */
  const publish = (messageId: string, reference: string) =>
    channel.sendToQueue(
      queue,
      Buffer.from(JSON.stringify({ pattern: PATTERN, data: { reference } })),
      { messageId },
    );
  const drained = () =>
    until(
      async () => (await channel.checkQueue(queue)).messageCount === 0,
      'the queue to drain',
    );
  const executed = (key: string) =>
    until(
      () => Promise.resolve(typesOf(consumer.events, key).includes('executed')),
      `message ${key} to execute`,
    );

  it('executes a message published five times once, and acknowledges every copy', async () => {
    const records = await consumer.subject.records();
    for (let i = 0; i < 5; i += 1) {
      publish('msg-1', 'rmq-1');
    }
    // The first copy holds the key while three more (the prefetch of four)
    // find it held and wait; the fifth comes once one is acknowledged.
    await consumer.effects.barrier.reached(1);
    await consumer.claims.reached('msg-1', 'in_progress', 3);
    consumer.effects.barrier.open();
    await until(
      () => Promise.resolve(typesOf(consumer.events, 'msg-1').length === 5),
      'five deliveries',
    );
    await drained();
    expect(typesOf(consumer.events, 'msg-1').sort()).toEqual([
      'executed',
      'replayed',
      'replayed',
      'replayed',
      'replayed',
    ]);
    expect(consumer.effects.runs).toEqual(['rmq-1']);
    expect(consumer.effects.effects).toEqual(['rmq-1']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('requeues a message whose handler failed after its side effect: the redelivery executes once and does not make it again', async () => {
    consumer.effects.barrier.open();
    const records = await consumer.subject.records();
    consumer.effects.failOnce.add('rmq-2');
    publish('msg-2', 'rmq-2');
    await executed('msg-2');
    await drained();
    expect(typesOf(consumer.events, 'msg-2')).toEqual(['failed', 'executed']);
    expect(consumer.effects.runs).toEqual(['rmq-2', 'rmq-2']);
    expect(consumer.effects.effects).toEqual(['rmq-2']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('rejects a message whose handler refused it with a 4xx instead of redelivering it forever, and leaves its key free', async () => {
    consumer.effects.barrier.open();
    const records = await consumer.subject.records();
    consumer.effects.invalid.add('rmq-bad');
    publish('msg-bad', 'rmq-bad');
    // Published after it: once this one is done, a requeued copy of the
    // refused message would have come back (RabbitMQ requeues at the head).
    publish('msg-after-bad', 'rmq-after-bad');
    await executed('msg-after-bad');
    await drained();
    expect(typesOf(consumer.events, 'msg-bad')).toEqual(['failed']);
    expect(consumer.effects.runs).toEqual(['rmq-bad', 'rmq-after-bad']);
    expect(consumer.effects.effects).toEqual(['rmq-after-bad']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('left no message unacknowledged: once the consumer is gone, nothing comes back to the queue', async () => {
    await consumer.close();
    const { messageCount, consumerCount } = await channel.checkQueue(queue);
    expect({ messageCount, consumerCount }).toEqual({
      messageCount: 0,
      consumerCount: 0,
    });
    // One record per message executed: msg-1, msg-2 and msg-after-bad.
    expect(await consumer.subject.records()).toBe(3);
  });
}

interface Answer {
  reply?: unknown;
  error?: unknown;
}

/** NATS request-reply and events: duplicates run once, in both modes. */
function natsOnStore(subjectOf: () => Promise<Subject>) {
  const consumer = consumerOnStore(
    subjectOf,
    { controllers: [PaymentsConsumer] },
    { transport: Transport.NATS, options: { servers: NATS_SERVERS } },
  );
  let client: ClientProxy;

  beforeAll(async () => {
    client = ClientProxyFactory.create({
      transport: Transport.NATS,
      options: { servers: NATS_SERVERS },
    });
    await client.connect();
  });
  afterAll(async () => {
    await client?.close();
  });

  /** The reply of a request, or the error the transport gave back. */
  const request = (subject: string, data: unknown): Promise<Answer> =>
    lastValueFrom(client.send<unknown>(subject, data)).then(
      (reply) => ({ reply }),
      (error: unknown) => ({ error }),
    );

  it('runs concurrent duplicate requests once in wait mode; the waiting ones get the identical stored reply', async () => {
    const records = await consumer.subject.records();
    const message = { idempotencyKey: 'nats-1', reference: 'nats-1' };
    const replies = Array.from({ length: 10 }, () =>
      request(SUBJECTS.wait, message),
    );
    await consumer.effects.barrier.reached(1);
    // Every duplicate found the key held, and waits for it.
    await consumer.claims.reached('nats-1', 'in_progress', 9);
    consumer.effects.barrier.open();
    const answers = await Promise.all(replies);
    expect(answers).toEqual(Array(10).fill({ reply: { orderId: 1, run: 1 } }));
    expect(typesOf(consumer.events, 'nats-1').sort()).toEqual([
      'executed',
      ...Array<string>(9).fill('replayed'),
    ]);
    expect(consumer.effects.runs).toEqual(['nats-1']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('refuses a concurrent duplicate in reject mode while the first runs, and replays after completion', async () => {
    const records = await consumer.subject.records();
    const message = { idempotencyKey: 'nats-2', reference: 'nats-2' };
    const first = request(SUBJECTS.reject, message);
    await consumer.effects.barrier.reached(1);
    const duplicate = await request(SUBJECTS.reject, message);
    expect(duplicate.error).toMatchObject({
      type: 'urn:idempotency:request-in-progress',
      status: 409,
    });
    consumer.effects.barrier.open();
    const done = await first;
    expect(done).toEqual({ reply: { orderId: 1, run: 1 } });
    expect(await request(SUBJECTS.reject, message)).toEqual(done);
    expect(consumer.effects.runs).toEqual(['nats-2']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('refuses a message without a key, writing no record, and one reusing a key for other data', async () => {
    consumer.effects.barrier.open();
    const records = await consumer.subject.records();
    const keyless = await request(SUBJECTS.reject, { reference: 'nats-3' });
    expect(keyless.error).toMatchObject({
      type: 'urn:idempotency:missing-key',
      status: 400,
    });
    expect(consumer.effects.runs).toEqual([]);
    expect(await consumer.subject.records()).toBe(records);
    const message = { idempotencyKey: 'nats-4', reference: 'nats-4' };
    expect(await request(SUBJECTS.reject, message)).toEqual({
      reply: { orderId: 1, run: 1 },
    });
    const reused = await request(SUBJECTS.reject, {
      ...message,
      reference: 'other',
    });
    expect(reused.error).toMatchObject({
      type: 'urn:idempotency:key-reused',
      status: 422,
    });
    expect(consumer.effects.runs).toEqual(['nats-4']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('handles a redelivered event once and drops the duplicates', async () => {
    consumer.effects.barrier.open();
    const records = await consumer.subject.records();
    const message = { idempotencyKey: 'nats-5', reference: 'nats-5' };
    for (let i = 1; i <= 3; i += 1) {
      await lastValueFrom(client.emit(SUBJECTS.event, message), {
        defaultValue: undefined,
      });
      await until(
        () => Promise.resolve(typesOf(consumer.events, 'nats-5').length === i),
        `delivery ${i}`,
      );
    }
    expect(typesOf(consumer.events, 'nats-5')).toEqual([
      'executed',
      'replayed',
      'replayed',
    ]);
    expect(consumer.effects.runs).toEqual(['nats-5']);
    expect(consumer.effects.effects).toEqual(['nats-5']);
    expect(await consumer.subject.records()).toBe(records + 1);
  });
}

/**
 * A BullMQ processor: a job retried after a failure, or added again, makes
 * its side effect once.
 */
function bullmqOnStore(store: string, subjectOf: () => Promise<Subject>) {
  const connection = { ...REDIS };
  const prefix = nameOf(store);
  const consumer = consumerOnStore(subjectOf, {
    imports: [
      BullModule.forRoot({ connection, prefix }),
      BullModule.registerQueue({ name: JOBS_QUEUE }),
    ],
    providers: [ChargesProcessor],
  });
  let queue: Queue<ChargeJob>;
  let queueEvents: QueueEvents;

  beforeAll(async () => {
    queue = new Queue<ChargeJob>(JOBS_QUEUE, { connection, prefix });
    queueEvents = new QueueEvents(JOBS_QUEUE, { connection, prefix });
    await Promise.all([queue.waitUntilReady(), queueEvents.waitUntilReady()]);
  });
  afterAll(async () => {
    await queue?.obliterate({ force: true });
    await Promise.all([queue?.close(), queueEvents?.close()]);
  });

  /** Adds a job and waits until it completed (its result) or failed (throws). */
  const processed = async (data: ChargeJob, options: JobsOptions) =>
    (await queue.add('charge', data, options)).waitUntilFinished(queueEvents);

  it('retries a job that failed after its side effect: the retry resumes after it, and completes once', async () => {
    const records = await consumer.subject.records();
    expect(
      await processed(
        { reference: 'job-1', failFirst: true },
        { jobId: 'job-1', attempts: 2 },
      ),
    ).toEqual({ charge: 1, attempt: 2 });
    expect(consumer.effects.runs).toEqual(['job-1', 'job-1']);
    expect(consumer.effects.effects).toEqual(['job-1']);
    expect(typesOf(consumer.events, `${JOBS_QUEUE}:job-1`)).toEqual([
      'executed',
    ]);
    expect(await consumer.subject.records()).toBe(records + 1);
  });

  it('gives a job added again with the same id the stored result, without running it', async () => {
    const first = await processed({ reference: 'job-2' }, { jobId: 'job-2' });
    expect(first).toEqual({ charge: 1, attempt: 1 });
    const records = await consumer.subject.records();
    // BullMQ refuses a job id it still holds: the producer's retry after
    // the first was removed is the duplicate.
    await (await queue.getJob('job-2'))!.remove();
    expect(await processed({ reference: 'job-2' }, { jobId: 'job-2' })).toEqual(
      first,
    );
    expect(consumer.effects.runs).toEqual(['job-2']);
    expect(typesOf(consumer.events, `${JOBS_QUEUE}:job-2`)).toEqual([
      'executed',
      'replayed',
    ]);
    expect(await consumer.subject.records()).toBe(records);
  });
}

describe.each([
  ['in-memory', memorySubject, describe],
  ['Redis', redisSubject, describeRedis],
  ['Redis (on Valkey)', valkeySubject, describeWithValkeyServer()],
  ['DynamoDB', dynamoSubject, describe],
] as const)(
  'message handlers on the %s store, without TypeORM',
  (store, subjectOf, describeStore) => {
    where(describeRabbit, describeStore)(
      '@Idempotent() on a RabbitMQ consumer with manual acknowledgement',
      () => rabbitOnStore(store, subjectOf),
    );
    where(describeNats, describeStore)('@Idempotent() on NATS handlers', () =>
      natsOnStore(subjectOf),
    );
    where(describeRedis, describeStore)(
      '@Idempotent() on a BullMQ processor',
      () => bullmqOnStore(store, subjectOf),
    );
  },
);
