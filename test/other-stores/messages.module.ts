import { BadRequestException, Controller, Injectable } from '@nestjs/common';
import { Processor, WorkerHost } from '@nestjs/bullmq';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { Job } from 'bullmq';
import { randomUUID } from 'node:crypto';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import {
  PaymentHandlers,
  type PaymentMessage,
} from '../messages/nats.handlers.js';
import { Barrier } from '../utils/barrier.js';

/** Of this run only: other runs on the same brokers do not interfere. */
const RUN = randomUUID().slice(0, 8);
export const PATTERN = 'payments.captured';

export const JOBS_QUEUE = 'idempotency-charges';

/** A name of this run and of one store's suite: a RabbitMQ queue, a BullMQ prefix. */
export const nameOf = (store: string) =>
  `idempotency-stores-${RUN}-${store.replace(/\W+/g, '-')}`;

/** What the handlers did, for the tests to assert: the store holds no rows. */
@Injectable()
export class Effects {
  /** The reference of every run of a handler, in order. */
  readonly runs: string[] = [];
  /** The reference of every side effect made (a ledger entry), in order. */
  readonly effects: string[] = [];
  /** References whose first attempt fails after its side effect. */
  readonly failOnce = new Set<string>();
  /** References that every attempt refuses as a client error (4xx). */
  readonly invalid = new Set<string>();
  /** Where the handlers wait: closed at the start of each test. */
  barrier = new Barrier();

  /** How many times `reference` appears in `list`. */
  static count(list: readonly string[], reference: string): number {
    return list.filter((seen) => seen === reference).length;
  }

  reset(): void {
    this.runs.length = 0;
    this.effects.length = 0;
    this.failOnce.clear();
    this.invalid.clear();
    this.barrier = new Barrier();
  }
}

@Controller()
export class CapturesConsumer {
  constructor(
    private readonly effects: Effects,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @EventPattern(PATTERN)
  @Idempotent({ concurrency: 'wait', acknowledge: true })
  async captured(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.effects.runs.push(reference);
    await this.effects.barrier.wait();
    if (this.effects.invalid.has(reference)) {
      throw new BadRequestException(`${reference} is not a valid capture`);
    }
    // No transaction rolls a side effect back on these stores: a step
    // stores it as soon as it is made, and a redelivery resumes after it.
    await this.idempotency.step('ledger', () =>
      this.effects.effects.push(reference),
    );
    if (this.effects.failOnce.delete(reference)) {
      throw new Error('the notification service is down');
    }
  }
}

/** The NATS handlers, whose side effects are counted. */
@Controller()
export class PaymentsConsumer extends PaymentHandlers {
  constructor(private readonly effects: Effects) {
    super();
  }

  protected async create({ reference }: PaymentMessage) {
    this.effects.runs.push(reference);
    const orderId = this.effects.effects.push(reference);
    await this.effects.barrier.wait();
    return { orderId, run: Effects.count(this.effects.runs, reference) };
  }
}

/** What the producer of the BullMQ suite sends. */
export interface ChargeJob {
  reference: string;
  /** The first attempt fails after its side effect. */
  failFirst?: boolean;
}

@Processor(JOBS_QUEUE)
export class ChargesProcessor extends WorkerHost {
  constructor(
    private readonly effects: Effects,
    private readonly idempotency: IdempotencyContext,
  ) {
    super();
  }

  @Idempotent()
  async process(job: Job<ChargeJob>) {
    const { reference, failFirst } = job.data;
    this.effects.runs.push(reference);
    const charge = await this.idempotency.step('charge', () =>
      this.effects.effects.push(reference),
    );
    if (failFirst && job.attemptsMade === 0) {
      throw new Error(`The first attempt at ${reference} fails`);
    }
    return { charge, attempt: job.attemptsMade + 1 };
  }
}
