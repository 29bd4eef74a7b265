import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { BullModule, type WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Redis } from 'ioredis';
import {
  Queue,
  QueueEvents,
  UnrecoverableError,
  type Job,
  type JobsOptions,
} from 'bullmq';
import {
  IdempotencyConflictException,
  IdempotencyModule,
  IdempotencyNotReplayableException,
  IdempotencyUnavailableException,
  type IdempotencyEvent,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier, untilWaiting } from '../utils/barrier.js';
import { describeWithBroker } from '../utils/broker.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import {
  CancellableProcessor,
  DEFAULT_PREFIX_QUEUE,
  DefaultPrefixProcessor,
  gates,
  MisdecoratedProcessor,
  OrdersProcessor,
  ParcelsProcessor,
  QUEUES,
  REDIS,
  RejectingProcessor,
  StatementsProcessor,
  WaitingProcessor,
  LargeResultProcessor,
  type OrderJob,
  type OrderResult,
} from './bullmq.module.js';

// BullMQ 6 connects through ioredis only when it is installed: without it,
// its workers retry forever instead of failing.
try {
  createRequire(import.meta.url).resolve('ioredis');
} catch {
  throw new Error(
    'The BullMQ tests need the ioredis package (a peer of bullmq 6): add it to devDependencies.',
  );
}
const describeRedis = await describeWithBroker('Redis', REDIS.host, REDIS.port);

/** A BullMQ prefix of this test file's own: its queues are nobody else's. */
const PREFIX = `idempotency-test-${randomUUID().slice(0, 8)}`;
const connection = { ...REDIS };

/** A queue of the suite, and the events its jobs finish with. */
interface TestQueue {
  readonly queue: Queue<OrderJob>;
  readonly events: QueueEvents;
}

async function openQueue(name: string): Promise<TestQueue> {
  const queue = new Queue<OrderJob>(name, { connection, prefix: PREFIX });
  const events = new QueueEvents(name, { connection, prefix: PREFIX });
  await Promise.all([queue.waitUntilReady(), events.waitUntilReady()]);
  return { queue, events };
}

async function closeQueue({ queue, events }: TestQueue): Promise<void> {
  await queue.obliterate({ force: true });
  await Promise.all([queue.close(), events.close()]);
}

describeRedis('@Idempotent() on BullMQ processors', () => {
  let target: TestApp;
  const queues = new Map<string, TestQueue>();
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    target = await startTestApp({
      imports: [
        BullModule.forRoot({ connection, prefix: PREFIX }),
        BullModule.registerQueue(
          ...Object.values(QUEUES).map((name) => ({ name })),
        ),
        TypeOrmModule.forFeature([Order]),
      ],
      providers: [
        OrdersProcessor,
        ParcelsProcessor,
        RejectingProcessor,
        WaitingProcessor,
        LargeResultProcessor,
        StatementsProcessor,
        CancellableProcessor,
      ],
      idempotency: { onEvent: (event) => events.push(event) },
    });
    for (const name of Object.values(QUEUES)) {
      queues.set(name, await openQueue(name));
    }
  });
  afterAll(async () => {
    await Promise.all([...queues.values()].map(closeQueue));
    await target?.close();
  });

  /** Adds a job and waits until it completed (its result) or failed (throws). */
  async function processed(
    queueName: string,
    data: OrderJob,
    options: JobsOptions = {},
    name = 'order',
  ): Promise<{ job: Job<OrderJob>; result: OrderResult }> {
    const { queue, events: jobEvents } = queues.get(queueName)!;
    const job = await queue.add(name, data, options);
    const result = (await job.waitUntilFinished(jobEvents)) as OrderResult;
    return { job, result };
  }

  /** The job as Redis now has it. */
  async function reread(queueName: string, id: string): Promise<Job> {
    return (await queues.get(queueName)!.queue.getJob(id))!;
  }

  const orders = async (reference: string) =>
    target.db.query<{ id: number; source: string }>(
      'SELECT id, source FROM orders WHERE reference = $1 ORDER BY id',
      [reference],
    );
  const records = async (key: string) =>
    target.db.query<{
      scope: string;
      status: string;
      method: string;
      path: string;
      body: string | null;
    }>(
      `SELECT scope, status, method, path, convert_from(response_body, 'UTF8') AS body
       FROM idempotency_records WHERE key = $1 ORDER BY scope`,
      [key],
    );

  /** The next failed attempt of a processor's worker (retried or not). */
  function nextFailure(processor: WorkerHost): Promise<[Job, Error]> {
    return new Promise((resolve) =>
      processor.worker.once('failed', (job, error) => resolve([job!, error])),
    );
  }

  it('runs a job once, commits its row with the record of key <queue>:<jobId>, and gives a job re-added with that id the stored result without running', async () => {
    const { result } = await processed(
      QUEUES.orders,
      { reference: 'once-1' },
      { jobId: 'once-1' },
    );
    const [order] = await orders('once-1');
    expect(result).toEqual({ id: order.id, reference: 'once-1', attempt: 1 });
    expect(await records(`${QUEUES.orders}:once-1`)).toEqual([
      {
        scope: `bullmq:${PREFIX}:${QUEUES.orders}`,
        status: 'completed',
        method: 'JOB',
        path: QUEUES.orders,
        body: JSON.stringify(result),
      },
    ]);

    // BullMQ refuses a job id it still holds: the producer's retry after
    // the first was removed (or after removeOnComplete) is the duplicate.
    await (await reread(QUEUES.orders, 'once-1')).remove();
    const again = await processed(
      QUEUES.orders,
      { reference: 'once-1' },
      { jobId: 'once-1' },
    );
    expect(again.result).toEqual(result);
    expect(await orders('once-1')).toHaveLength(1);
    expect(
      events.filter((event) => event.key === `${QUEUES.orders}:once-1`),
    ).toEqual([
      expect.objectContaining({ type: 'executed', method: 'JOB' }),
      expect.objectContaining({ type: 'replayed', method: 'JOB' }),
    ]);
  });

  it('completes, without a result, a job re-added after one whose result was not stored: it ran already, it is not failed', async () => {
    const first = await processed(
      QUEUES.large,
      { reference: 'large-1' },
      { jobId: 'large-1' },
    );
    expect(first.result).toMatchObject({ reference: 'large-1', attempt: 1 });
    await (await reread(QUEUES.large, 'large-1')).remove();
    const again = await processed(
      QUEUES.large,
      { reference: 'large-1' },
      { jobId: 'large-1' },
    );
    expect(again.result ?? null).toBeNull();
    expect(await (await reread(QUEUES.large, 'large-1')).isCompleted()).toBe(
      true,
    );
    expect(await orders('large-1')).toHaveLength(1);
  });

  it('fails a job whose process threw the refusal of a nested run() whose result was not stored (UnrecoverableError): its write rolled back, never completed as a duplicate of its own', async () => {
    await processed(
      QUEUES.statements,
      { reference: 'statement-a', orderId: 'statement-1' },
      { jobId: 'statement-a' },
    );
    const failure = nextFailure(target.app.get(StatementsProcessor));
    // Before the fix the job completed without a result, as a duplicate of
    // a job processed already: its write rolled back, lost for good.
    await expect(
      processed(
        QUEUES.statements,
        { reference: 'statement-b', orderId: 'statement-1' },
        { jobId: 'statement-b', attempts: 3 },
      ),
    ).rejects.toThrow('Response not replayable');
    const [, error] = await failure;
    expect(error).toBeInstanceOf(UnrecoverableError);
    expect(error.cause).toBeInstanceOf(IdempotencyNotReplayableException);
    const job = await reread(QUEUES.statements, 'statement-b');
    expect(await job.isFailed()).toBe(true);
    expect(job.attemptsMade).toBe(1);
    expect(await orders('statement-a')).toHaveLength(1);
    expect(await orders('statement-b')).toEqual([]);
    expect(await records(`${QUEUES.statements}:statement-b`)).toEqual([]);
  });

  it("keys a job without a jobId by BullMQ's own id and its creation time: a new job given that id again once the queue's counter started over runs", async () => {
    const { queue } = queues.get(QUEUES.orders)!;
    const { job, result } = await processed(QUEUES.orders, {
      reference: 'auto-id-1',
    });
    expect(job.id).toMatch(/^\d+$/);
    expect(
      await records(`${QUEUES.orders}:${job.id}@${job.timestamp}`),
    ).toEqual([
      expect.objectContaining({
        scope: `bullmq:${PREFIX}:${QUEUES.orders}`,
        body: JSON.stringify(result),
      }),
    ]);

    // The queue's id counter starts over (the queue obliterated, its Redis
    // flushed or failed over without persistence): the next job, the same
    // work asked again, gets the same id.
    await (await reread(QUEUES.orders, job.id!)).remove();
    const redis = new Redis(REDIS);
    try {
      await redis.set(queue.keys.id, Number(job.id) - 1);
    } finally {
      redis.disconnect();
    }
    const again = await processed(QUEUES.orders, { reference: 'auto-id-1' });
    expect(again.job.id).toBe(job.id);
    const rows = await orders('auto-id-1');
    expect(rows).toHaveLength(2);
    expect(again.result).toEqual({
      id: rows[1].id,
      reference: 'auto-id-1',
      attempt: 1,
    });
    // A producer's id that only looks like a number (BullMQ refuses
    // integer ones) is the producer's: keyed as it is.
    await processed(
      QUEUES.orders,
      { reference: 'padded-id' },
      { jobId: '0042' },
    );
    expect(await records(`${QUEUES.orders}:0042`)).toHaveLength(1);
  });

  it('scopes keys per queue: the same job id on two queues runs on each, and each replays its own result', async () => {
    const first = await Promise.all(
      [QUEUES.orders, QUEUES.parcels].map((queue) =>
        processed(queue, { reference: 'both-1' }, { jobId: 'both-1' }),
      ),
    );
    const rows = await orders('both-1');
    expect(rows.map((row) => row.source).sort()).toEqual(
      [QUEUES.orders, QUEUES.parcels].sort(),
    );
    expect(first.map(({ result }) => result.id).sort()).toEqual(
      rows.map((row) => row.id).sort(),
    );
    expect(await records(`${QUEUES.orders}:both-1`)).toEqual([
      expect.objectContaining({ scope: `bullmq:${PREFIX}:${QUEUES.orders}` }),
    ]);
    expect(await records(`${QUEUES.parcels}:both-1`)).toEqual([
      expect.objectContaining({ scope: `bullmq:${PREFIX}:${QUEUES.parcels}` }),
    ]);

    for (const [index, queue] of [QUEUES.orders, QUEUES.parcels].entries()) {
      await (await reread(queue, 'both-1')).remove();
      const again = await processed(
        queue,
        { reference: 'both-1' },
        { jobId: 'both-1' },
      );
      expect(again.result).toEqual(first[index].result);
    }
    expect(await orders('both-1')).toHaveLength(2);
  });

  describe('one queue name under two BullMQ prefixes, two applications on one database', () => {
    /** An application of the orders queue under its prefix, and its producer. */
    interface Tenant {
      readonly app: TestApp;
      readonly queue: TestQueue;
    }
    const tenants = new Map<string, Tenant>();

    const startTenant = async (
      name: string,
      queueName: string,
      processor: typeof OrdersProcessor,
      prefix?: string,
    ): Promise<Tenant> => {
      const app = await startTestApp({
        database: target.db,
        imports: [
          BullModule.forRoot({ connection, prefix }),
          BullModule.registerQueue({ name: queueName }),
          TypeOrmModule.forFeature([Order]),
        ],
        providers: [processor],
      });
      const queue = new Queue<OrderJob>(queueName, { connection, prefix });
      const queueEvents = new QueueEvents(queueName, { connection, prefix });
      await Promise.all([queue.waitUntilReady(), queueEvents.waitUntilReady()]);
      const tenant = { app, queue: { queue, events: queueEvents } };
      tenants.set(name, tenant);
      return tenant;
    };
    const tenantPrefix = (name: string) => `${PREFIX}-${name}`;

    beforeAll(async () => {
      for (const name of ['tenantA', 'tenantB']) {
        await startTenant(
          name,
          QUEUES.orders,
          OrdersProcessor,
          tenantPrefix(name),
        );
      }
    });
    afterAll(async () => {
      for (const { app, queue } of tenants.values()) {
        await closeQueue(queue);
        await app.close();
      }
    });

    /** Adds a job on a tenant's queue and waits for its result. */
    const processedBy = async (
      tenant: string,
      data: OrderJob,
      jobId: string,
    ): Promise<OrderResult> => {
      const { queue, events: jobEvents } = tenants.get(tenant)!.queue;
      const job = await queue.add('order', data, { jobId });
      const result = (await job.waitUntilFinished(jobEvents)) as OrderResult;
      await job.remove();
      return result;
    };

    it("runs the same job id with the same data under each prefix, each with a record in its prefix's scope, and replays each its own result", async () => {
      const first = {
        tenantA: await processedBy(
          'tenantA',
          { reference: 'tenant-1' },
          'tenant-1',
        ),
        tenantB: await processedBy(
          'tenantB',
          { reference: 'tenant-1' },
          'tenant-1',
        ),
      };
      const rows = await orders('tenant-1');
      expect(rows).toHaveLength(2);
      expect([first.tenantA.id, first.tenantB.id]).toEqual(
        rows.map((row) => row.id),
      );
      expect(await records(`${QUEUES.orders}:tenant-1`)).toEqual(
        ['tenantA', 'tenantB'].map((tenant) =>
          expect.objectContaining({
            scope: `bullmq:${tenantPrefix(tenant)}:${QUEUES.orders}`,
            status: 'completed',
            body: JSON.stringify(first[tenant as keyof typeof first]),
          }),
        ),
      );

      expect(
        await processedBy('tenantB', { reference: 'tenant-1' }, 'tenant-1'),
      ).toEqual(first.tenantB);
      expect(
        await processedBy('tenantA', { reference: 'tenant-1' }, 'tenant-1'),
      ).toEqual(first.tenantA);
      expect(await orders('tenant-1')).toHaveLength(2);
    });

    it('runs the same job id with other data under another prefix instead of refusing it as a reused key', async () => {
      const a = await processedBy(
        'tenantA',
        { reference: 'tenant-2' },
        'tenant-2',
      );
      const b = await processedBy(
        'tenantB',
        { reference: 'tenant-2', orderId: 'another' },
        'tenant-2',
      );
      const rows = await orders('tenant-2');
      expect(rows.map((row) => row.id)).toEqual([a.id, b.id]);
      expect(b).toEqual({ id: rows[1].id, reference: 'tenant-2', attempt: 1 });
    });

    it("keeps the scope bullmq:<queueName> under BullMQ's default prefix (bull), which the records of earlier versions have", async () => {
      await startTenant(
        'default',
        DEFAULT_PREFIX_QUEUE,
        DefaultPrefixProcessor,
      );
      const first = await processedBy(
        'default',
        { reference: 'bull-1' },
        'bull-1',
      );
      expect(await records(`${DEFAULT_PREFIX_QUEUE}:bull-1`)).toEqual([
        expect.objectContaining({
          scope: `bullmq:${DEFAULT_PREFIX_QUEUE}`,
          status: 'completed',
          body: JSON.stringify(first),
        }),
      ]);
      expect(
        await processedBy('default', { reference: 'bull-1' }, 'bull-1'),
      ).toEqual(first);
      expect(await orders('bull-1')).toHaveLength(1);
    });
  });

  it.each<[string, Partial<OrderJob>, string]>([
    ['other data', { orderId: 'another' }, 'order'],
    ['another job name', {}, 'refund'],
  ])(
    'fails a job whose id was used with %s at once, without retries (UnrecoverableError), and runs nothing',
    async (_, data, name) => {
      const jobId = `reused-${name}`;
      const { result } = await processed(
        QUEUES.orders,
        { reference: jobId },
        { jobId },
      );
      await (await reread(QUEUES.orders, jobId)).remove();
      const failure = nextFailure(target.app.get(OrdersProcessor));
      await expect(
        processed(
          QUEUES.orders,
          { reference: jobId, ...data },
          { jobId, attempts: 3 },
          name,
        ),
      ).rejects.toThrow(
        'Idempotency key reused: This idempotency key was already used for a different request.',
      );
      const [, error] = await failure;
      expect(error).toBeInstanceOf(UnrecoverableError);
      const job = await reread(QUEUES.orders, jobId);
      expect(await job.getState()).toBe('failed');
      expect(job.attemptsMade).toBe(1);
      expect(await orders(jobId)).toEqual([
        expect.objectContaining({ id: result.id }),
      ]);
    },
  );

  it('fails a job its key option finds no key for at once (400, UnrecoverableError), with the problem as its reason, and runs nothing', async () => {
    const failure = nextFailure(target.app.get(RejectingProcessor));
    await expect(
      processed(
        QUEUES.rejecting,
        { reference: 'keyless-1' },
        { jobId: 'keyless-1', attempts: 3 },
      ),
    ).rejects.toThrow(
      'Idempotency key missing: The "key" option found no idempotency key for this operation.',
    );
    const [, error] = await failure;
    expect(error).toBeInstanceOf(UnrecoverableError);
    const job = await reread(QUEUES.rejecting, 'keyless-1');
    expect(job.failedReason).toBe(
      'Idempotency key missing: The "key" option found no idempotency key for this operation.',
    );
    expect(job.attemptsMade).toBe(1);
    expect(await orders('keyless-1')).toEqual([]);
  });

  it("rolls back a job that wrote then threw and frees its key: BullMQ's retry runs it again, and its row exists once", async () => {
    const { job, result } = await processed(
      QUEUES.orders,
      { reference: 'retry-1', failFirst: true },
      { jobId: 'retry-1', attempts: 2 },
    );
    const rows = await orders('retry-1');
    expect(rows).toHaveLength(1);
    expect(result).toEqual({
      id: rows[0].id,
      reference: 'retry-1',
      attempt: 2,
    });
    expect((await reread(QUEUES.orders, job.id!)).attemptsMade).toBe(2);
    expect(await records(`${QUEUES.orders}:retry-1`)).toEqual([
      expect.objectContaining({
        status: 'completed',
        body: JSON.stringify(result),
      }),
    ]);
  });

  it("hands BullMQ's abort signal to process: a job cancelled while it runs (worker.cancelJob) fails, its write rolled back and its key free, and its retry runs", async () => {
    gates.hold = new Barrier();
    const processor = target.app.get(CancellableProcessor);
    const job = await queues.get(QUEUES.cancellable)!.queue.add(
      'order',
      { reference: 'cancel-1', hold: true },
      {
        jobId: 'cancel-1',
        attempts: 2,
        backoff: { type: 'fixed', delay: 600_000 },
      },
    );
    await gates.hold.reached(1);
    const failure = nextFailure(processor);
    expect(
      processor.worker.cancelJob('cancel-1', 'the order was withdrawn'),
    ).toBe(true);
    gates.hold.open();
    const [failed, error] = await failure;
    expect(failed.id).toBe('cancel-1');
    expect(error.message).toBe('Cancelled: the order was withdrawn');
    expect(await orders('cancel-1')).toEqual([]);
    expect(await records(`${QUEUES.cancellable}:cancel-1`)).toEqual([]);

    await job.promote();
    const result = (await job.waitUntilFinished(
      queues.get(QUEUES.cancellable)!.events,
    )) as OrderResult;
    const rows = await orders('cancel-1');
    expect(rows).toHaveLength(1);
    expect(result).toEqual({
      id: rows[0].id,
      reference: 'cancel-1',
      attempt: 2,
    });
  });

  it("runs two concurrent jobs with one key once ('reject'): the duplicate fails with 409, and its retry gets the stored result", async () => {
    gates.hold = new Barrier();
    const { queue, events: jobEvents } = queues.get(QUEUES.rejecting)!;
    const first = await queue.add(
      'order',
      { reference: 'reject-1', orderId: 'o-reject', hold: true },
      { jobId: 'reject-a' },
    );
    await gates.hold.reached(1);
    const failure = nextFailure(target.app.get(RejectingProcessor));
    // A backoff the test cuts short (promote): the retry comes after the first.
    const duplicate = await queue.add(
      'order',
      { reference: 'reject-1', orderId: 'o-reject', hold: true },
      {
        jobId: 'reject-b',
        attempts: 2,
        backoff: { type: 'fixed', delay: 600_000 },
      },
    );
    const [failed, error] = await failure;
    expect(failed.id).toBe('reject-b');
    expect(error).toBeInstanceOf(IdempotencyConflictException);
    expect(await duplicate.getState()).toBe('delayed');
    // The problem's title and detail, not the exception's class name.
    const reason =
      'Request in progress: A request with this idempotency key is still being processed. Retry later to get its response.';
    expect(error.message).toBe(reason);
    expect((await reread(QUEUES.rejecting, 'reject-b')).failedReason).toBe(
      reason,
    );

    gates.hold.open();
    const result = (await first.waitUntilFinished(jobEvents)) as OrderResult;
    await duplicate.promote();
    expect(await duplicate.waitUntilFinished(jobEvents)).toEqual(result);
    const rows = await orders('reject-1');
    expect(rows).toHaveLength(1);
    expect(result.id).toBe(rows[0].id);
    expect((await reread(QUEUES.rejecting, 'reject-b')).attemptsMade).toBe(2);
    expect(await records('o-reject')).toEqual([
      expect.objectContaining({ scope: 'order-ids', status: 'completed' }),
    ]);
  });

  it("runs two concurrent jobs with one key once ('wait'): the duplicate waits and completes with the first one's result", async () => {
    gates.hold = new Barrier();
    const { queue, events: jobEvents } = queues.get(QUEUES.waiting)!;
    const data = { reference: 'wait-1', orderId: 'o-wait', hold: true };
    const first = await queue.add('order', data, { jobId: 'wait-a' });
    await gates.hold.reached(1);
    const duplicate = await queue.add('order', data, { jobId: 'wait-b' });
    await untilWaiting(target.db, 'o-wait');
    gates.hold.open();
    const results = await Promise.all(
      [first, duplicate].map((job) => job.waitUntilFinished(jobEvents)),
    );
    const rows = await orders('wait-1');
    expect(rows).toHaveLength(1);
    expect(results).toEqual([
      { id: rows[0].id, reference: 'wait-1', attempt: 1 },
      { id: rows[0].id, reference: 'wait-1', attempt: 1 },
    ]);
    expect(
      events
        .filter((event) => event.key === 'o-wait')
        .map((event) => event.type),
    ).toEqual(['executed', 'replayed']);
  });

  it('fails a job with 503 while the database refuses the claim, and BullMQ retries it', async () => {
    const failure = nextFailure(target.app.get(OrdersProcessor));
    // A column the claim writes, renamed: every claim fails.
    await target.db.query(
      'ALTER TABLE idempotency_records RENAME COLUMN owner_instance TO instance_away',
    );
    let job: Job<OrderJob>;
    try {
      job = await queues.get(QUEUES.orders)!.queue.add(
        'order',
        { reference: 'outage-1' },
        {
          jobId: 'outage-1',
          attempts: 2,
          backoff: { type: 'fixed', delay: 600_000 },
        },
      );
      const [failed, error] = await failure;
      expect(failed.id).toBe('outage-1');
      expect(error).toBeInstanceOf(IdempotencyUnavailableException);
      expect((await reread(QUEUES.orders, 'outage-1')).failedReason).toBe(
        'Request not completed: The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
      );
    } finally {
      await target.db.query(
        'ALTER TABLE idempotency_records RENAME COLUMN instance_away TO owner_instance',
      );
    }
    expect(await job.getState()).toBe('delayed');
    expect(await orders('outage-1')).toHaveLength(0);
    expect(await records(`${QUEUES.orders}:outage-1`)).toHaveLength(0);

    await job.promote();
    const result = (await job.waitUntilFinished(
      queues.get(QUEUES.orders)!.events,
    )) as OrderResult;
    const rows = await orders('outage-1');
    expect(rows).toHaveLength(1);
    expect(result).toEqual({
      id: rows[0].id,
      reference: 'outage-1',
      attempt: 2,
    });
  });

  it('works whatever the order of the imports, for a second application in the same process too', async () => {
    // @nestjs/bullmq imported first: its workers exist before the module's
    // onModuleInit. Another prefix: this application's queue is its own.
    const prefix = `${PREFIX}-first`;
    const second = await startTestApp({
      idempotency: false,
      imports: [
        BullModule.forRoot({ connection, prefix }),
        BullModule.registerQueue({ name: QUEUES.orders }),
        IdempotencyModule.forRoot(),
        TypeOrmModule.forFeature([Order]),
      ],
      providers: [OrdersProcessor],
    });
    const queue = new Queue<OrderJob>(QUEUES.orders, { connection, prefix });
    const queueEvents = new QueueEvents(QUEUES.orders, { connection, prefix });
    try {
      await queueEvents.waitUntilReady();
      const results: unknown[] = [];
      for (let i = 0; i < 2; i += 1) {
        const job = await queue.add(
          'order',
          { reference: 'order-1' },
          { jobId: 'order-1' },
        );
        results.push(await job.waitUntilFinished(queueEvents));
        await job.remove();
      }
      const rows = await second.db.query<{ id: number }>(
        `SELECT id FROM orders WHERE reference = 'order-1'`,
      );
      expect(rows).toHaveLength(1);
      expect(results).toEqual([
        { id: rows[0].id, reference: 'order-1', attempt: 1 },
        { id: rows[0].id, reference: 'order-1', attempt: 1 },
      ]);
      // The first application's instance of the class still runs its own.
      expect(await orders('order-1')).toHaveLength(0);
      const { result } = await processed(
        QUEUES.orders,
        { reference: 'order-1' },
        { jobId: 'order-1' },
      );
      expect(await orders('order-1')).toEqual([
        { id: result.id, source: QUEUES.orders },
      ]);
    } finally {
      await queue.obliterate({ force: true });
      await Promise.all([queue.close(), queueEvents.close()]);
      await second.close();
    }
  });

  it('keeps the claim of a job still running while its application shuts down with BullMQ imported first: a duplicate elsewhere gets 409, and the job completes once', async () => {
    // BullMQ imported before the module: Nest shuts the module down first,
    // and @nestjs/bullmq's workers then wait for their active jobs.
    const prefix = `${PREFIX}-closing`;
    const closing = await startTestApp({
      idempotency: false,
      database: target.db,
      imports: [
        BullModule.forRoot({ connection, prefix }),
        BullModule.registerQueue({ name: QUEUES.rejecting }),
        IdempotencyModule.forRoot(),
        TypeOrmModule.forFeature([Order]),
      ],
      providers: [RejectingProcessor],
    });
    const queue = new Queue<OrderJob>(QUEUES.rejecting, { connection, prefix });
    const queueEvents = new QueueEvents(QUEUES.rejecting, {
      connection,
      prefix,
    });
    try {
      await queueEvents.waitUntilReady();
      gates.hold = new Barrier();
      const data = { reference: 'closing-1', orderId: 'o-closing', hold: true };
      const first = await queue.add('order', data, { jobId: 'closing-a' });
      await gates.hold.reached(1);
      const worker = closing.app.get(RejectingProcessor).worker;
      const workerClosing = once(worker, 'closing');
      const closed = closing.close();
      await workerClosing;

      // The same order on this suite's application (the same scope, key
      // and request), while the first job still runs.
      const failure = nextFailure(target.app.get(RejectingProcessor));
      await queues.get(QUEUES.rejecting)!.queue.add('order', data, {
        jobId: 'closing-b',
      });
      const outcome = await Promise.race([
        failure.then(([, error]) => error),
        gates.hold.reached(2).then(() => 'ran while the first ran'),
      ]);
      expect(outcome).toBeInstanceOf(IdempotencyConflictException);

      gates.hold.open();
      const result = (await first.waitUntilFinished(
        queueEvents,
      )) as OrderResult;
      await closed;
      const rows = await orders('closing-1');
      expect(rows).toHaveLength(1);
      expect(result).toEqual({
        id: rows[0].id,
        reference: 'closing-1',
        attempt: 1,
      });
      expect(await records('o-closing')).toEqual([
        expect.objectContaining({
          scope: 'order-ids',
          status: 'completed',
          body: JSON.stringify(result),
        }),
      ]);
    } finally {
      gates.hold.open();
      await queue.obliterate({ force: true });
      await Promise.all([queue.close(), queueEvents.close()]);
    }
  });

  it('refuses to start with @Idempotent() on another method of a processor', async () => {
    await expect(
      startTestApp({
        imports: [
          BullModule.forRoot({ connection, prefix: `${PREFIX}-refused` }),
          BullModule.registerQueue({ name: QUEUES.orders }),
        ],
        providers: [MisdecoratedProcessor],
      }),
    ).rejects.toThrow(
      '@Idempotent() has no effect on MisdecoratedProcessor.charge (not a route or message handler)',
    );
  });

  describe('a job redelivered after its worker process was killed', () => {
    const CHARGES = 'idempotency-charges';
    const workers = new Set<SampleProcess>();
    let charges: TestQueue;

    beforeAll(async () => {
      charges = await openQueue(CHARGES);
    });
    afterAll(async () => {
      await Promise.all([...workers].map((worker) => worker.stop()));
      await closeQueue(charges);
    });

    const startWorker = async (env: Record<string, string> = {}) => {
      const worker = await startSample(
        {
          DATABASE_URL: target.db.url,
          BULLMQ_QUEUE: CHARGES,
          BULLMQ_PREFIX: PREFIX,
          ...env,
        },
        {
          entry: '../test/utils/bullmq-worker.js',
          ready: /BullMQ worker (\d+) ready/,
        },
      );
      workers.add(worker);
      return worker;
    };

    it('does not run again when BullMQ hands the stalled job to another worker: the job completes with the stored result', async () => {
      const killed = await startWorker({
        BULLMQ_KILL_AFTER_COMMIT: `${CHARGES}:charge-1`,
      });
      const stalled = once(charges.events, 'stalled');
      const job = await charges.queue.add(
        'charge',
        { reference: 'charge-1' },
        { jobId: 'charge-1' },
      );
      expect(await killed.exited()).toEqual({ code: null, signal: 'SIGKILL' });
      const rows = await orders('charge-1');
      expect(rows).toHaveLength(1);
      const stored = {
        id: rows[0].id,
        reference: 'charge-1',
        pid: Number(killed.url),
      };
      expect(await records(`${CHARGES}:charge-1`)).toEqual([
        expect.objectContaining({
          status: 'completed',
          body: JSON.stringify(stored),
        }),
      ]);
      expect(await job.getState()).toBe('active');

      const rescuer = await startWorker();
      expect(await job.waitUntilFinished(charges.events)).toEqual(stored);
      expect(await stalled).toEqual([
        expect.objectContaining({ jobId: 'charge-1' }),
        expect.any(String),
      ]);
      expect(await orders('charge-1')).toHaveLength(1);
      expect(Number(rescuer.url)).not.toBe(stored.pid);
    });
  });
});
