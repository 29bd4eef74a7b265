import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Processor, WorkerHost } from '@nestjs/bullmq';
import { InjectRepository } from '@nestjs/typeorm';
import type { Job } from 'bullmq';
import type { Repository } from 'typeorm';
import { Idempotent, IdempotencyService } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** The local Redis of the suite. */
export const REDIS = { host: '127.0.0.1', port: 6379 } as const;

/** The queues of this suite (under a BullMQ prefix of the test file's own). */
export const QUEUES = {
  orders: 'idempotency-orders',
  parcels: 'idempotency-parcels',
  rejecting: 'idempotency-keyed-reject',
  waiting: 'idempotency-keyed-wait',
  large: 'idempotency-large-results',
  statements: 'idempotency-nested-statements',
  cancellable: 'idempotency-cancellable',
} as const;

/**
 * A queue under BullMQ's default prefix (`bull`), which the suite's other
 * queues avoid: named for this run only.
 */
export const DEFAULT_PREFIX_QUEUE = `idempotency-default-prefix-${randomUUID().slice(0, 8)}`;

/** What the producers of this suite send. */
export interface OrderJob {
  reference: string;
  /** The keyed processors' key. */
  orderId?: string;
  /** The first attempt writes its row, then throws. */
  failFirst?: boolean;
  /** The handler waits at `gates.hold` after its write. */
  hold?: boolean;
}

/** What the processors return (and the module stores). */
export interface OrderResult {
  id: number;
  reference: string;
  attempt: number;
}

/** Where the test holds handlers: replaced by each test that uses it. */
export const gates = { hold: new Barrier() };

/**
 * Writes one order per job, in the job's transaction, and returns it.
 * Inherited by the processors of two queues: the method is wrapped once.
 */
@Injectable()
abstract class OrdersHost extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {
    super();
  }

  @Idempotent()
  async process(job: Job<OrderJob>): Promise<OrderResult> {
    return writeOrder(this.orders, job);
  }
}

async function writeOrder(
  orders: Repository<Order>,
  job: Job<OrderJob>,
): Promise<OrderResult> {
  const order = await orders.save(
    orders.create({ reference: job.data.reference, source: job.queueName }),
  );
  if (job.data.hold) {
    await gates.hold.wait();
  }
  if (job.data.failFirst && job.attemptsMade === 0) {
    throw new Error(`The first attempt at ${job.data.reference} fails`);
  }
  return {
    id: order.id,
    reference: order.reference,
    attempt: job.attemptsMade + 1,
  };
}

@Processor(QUEUES.orders)
export class OrdersProcessor extends OrdersHost {}

@Processor(QUEUES.parcels)
export class ParcelsProcessor extends OrdersHost {}

@Processor(DEFAULT_PREFIX_QUEUE)
export class DefaultPrefixProcessor extends OrdersHost {}

/** Keyed by the order id in the job's data, in a scope of its own. */
const byOrderId = {
  key: (context: { getArgByIndex<T>(index: number): T }) =>
    context.getArgByIndex<Job<OrderJob>>(0).data.orderId,
  scope: () => 'order-ids',
};

/** Its results are over maxResponseSize (10 bytes): not stored. */
@Processor(QUEUES.large)
export class LargeResultProcessor extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {
    super();
  }

  @Idempotent({ maxResponseSize: 10 })
  async process(job: Job<OrderJob>): Promise<OrderResult> {
    return writeOrder(this.orders, job);
  }
}

/**
 * Writes its order, then makes the statement its data names in a nested
 * `run()`, whose result is over the module's maxResponseSize (1 MiB): the
 * statement's next `run()` is refused as not replayable.
 */
@Processor(QUEUES.statements)
export class StatementsProcessor extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly idempotency: IdempotencyService,
  ) {
    super();
  }

  @Idempotent()
  async process(job: Job<OrderJob>): Promise<OrderResult> {
    const result = await writeOrder(this.orders, job);
    await this.idempotency.run(
      { key: job.data.orderId!, scope: 'statements' },
      () => Promise.resolve('x'.repeat(1_100_000)),
    );
    return result;
  }
}

/**
 * Takes BullMQ's abort signal (a third parameter), by which
 * `worker.cancelJob()` cancels a job: writes its order, waits at
 * `gates.hold` when told, then fails if the job was cancelled meanwhile.
 */
@Processor(QUEUES.cancellable)
export class CancellableProcessor extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {
    super();
  }

  @Idempotent()
  async process(
    job: Job<OrderJob>,
    _token?: string,
    signal?: AbortSignal,
  ): Promise<OrderResult> {
    const result = await writeOrder(this.orders, job);
    if (signal?.aborted) {
      throw new Error(`Cancelled: ${String(signal.reason)}`);
    }
    return result;
  }
}

/** Two jobs at once; a concurrent duplicate is refused (409). */
@Processor(QUEUES.rejecting, { concurrency: 2 })
export class RejectingProcessor extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {
    super();
  }

  @Idempotent({ ...byOrderId, concurrency: 'reject' })
  async process(job: Job<OrderJob>): Promise<OrderResult> {
    return writeOrder(this.orders, job);
  }
}

/** Two jobs at once; a concurrent duplicate waits for the first. */
@Processor(QUEUES.waiting, { concurrency: 2 })
@Idempotent({ ...byOrderId, concurrency: 'wait' })
export class WaitingProcessor extends WorkerHost {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {
    super();
  }

  async process(job: Job<OrderJob>): Promise<OrderResult> {
    return writeOrder(this.orders, job);
  }

  /** Not a handler: the class's `@Idempotent()` leaves it alone. */
  describe(job: Job<OrderJob>): string {
    return `${job.name} ${job.data.reference}`;
  }
}

/** `@Idempotent()` on a method BullMQ never calls: refused at bootstrap. */
@Processor(QUEUES.orders)
export class MisdecoratedProcessor extends WorkerHost {
  async process(job: Job<OrderJob>): Promise<string> {
    return this.charge(job.data.reference);
  }

  @Idempotent()
  charge(reference: string): Promise<string> {
    return Promise.resolve(reference);
  }
}
