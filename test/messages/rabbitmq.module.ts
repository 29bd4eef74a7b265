import {
  BadRequestException,
  Controller,
  Injectable,
  Module,
} from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { Repository } from 'typeorm';
import { Idempotent, type IdempotencyDeadLetter } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** A queue of this run only. */
export const QUEUE = `idempotency-test-${randomUUID().slice(0, 8)}`;
export const PATTERN = 'payments.captured';
/** Messages whose handler always fails: after two attempts, dead-lettered. */
export const POISON_PATTERN = 'payments.poison';

/** Messages whose result is over the route's maxResponseSize (10 bytes). */
export const LARGE_PATTERN = 'payments.large';

/**
 * Messages keyed by a header, where no key is required: a key refused is
 * handed to the dead-letter path at once.
 */
export const HEADER_KEY_PATTERN = 'payments.header-keyed';

/**
 * Messages whose handler catches a deadlock of its own statement, which a
 * retry may not meet, and answers it with an error of its own: at most one
 * attempt before deadLetter, which such a failure must never reach.
 */
export const DEADLOCK_PATTERN = 'payments.deadlocked';

/** What the poison route's dead-letter path was handed. */
export const deadLetters: IdempotencyDeadLetter[] = [];

/** What the header-keyed route's dead-letter path was handed. */
export const refusedKeys: IdempotencyDeadLetter[] = [];

@Injectable()
export class Deliveries {
  runs = 0;
  /** Runs of the header-keyed route. */
  headerKeyedRuns = 0;
  /** Keys whose first attempt fails after writing, to force a redelivery. */
  readonly failOnce = new Set<string>();
  /** Keys whose every attempt is refused as a client error (4xx). */
  readonly invalid = new Set<string>();
  /**
   * References whose first attempt meets a deadlock, which the handler
   * answers with this error of its own.
   */
  readonly deadlockOnce = new Map<string, Error>();
}

@Controller()
export class CapturesConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly deliveries: Deliveries,
  ) {}

  @EventPattern(PATTERN)
  @Idempotent({ concurrency: 'wait', acknowledge: true })
  async captured(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.deliveries.runs += 1;
    await this.orders.insert({ reference, source: 'rabbitmq' });
    if (this.deliveries.invalid.has(reference)) {
      throw new BadRequestException(`${reference} is not a valid capture`);
    }
    if (this.deliveries.failOnce.delete(reference)) {
      throw new Error('the ledger service is down');
    }
  }
}

@Controller()
export class PoisonConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly deliveries: Deliveries,
  ) {}

  @EventPattern(POISON_PATTERN)
  @Idempotent({
    acknowledge: true,
    maxAttempts: 2,
    deadLetter: (letter) => {
      deadLetters.push(letter);
    },
  })
  async poison(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.deliveries.runs += 1;
    await this.orders.insert({ reference, source: 'rabbitmq' });
    throw new Error('the ledger refuses it');
  }
}

@Controller()
export class LargeResultConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly deliveries: Deliveries,
  ) {}

  /** Its result is too large to be stored: its duplicates are refused. */
  @EventPattern(LARGE_PATTERN)
  @Idempotent({
    acknowledge: true,
    maxResponseSize: 10,
    maxAttempts: 2,
    deadLetter: (letter) => {
      deadLetters.push(letter);
    },
  })
  async large(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.deliveries.runs += 1;
    await this.orders.insert({ reference, source: 'rabbitmq' });
    return { reference, padding: 'x'.repeat(100) };
  }
}

@Controller()
export class HeaderKeyedConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly deliveries: Deliveries,
  ) {}

  @EventPattern(HEADER_KEY_PATTERN)
  @Idempotent({
    acknowledge: true,
    concurrency: 'wait',
    required: false,
    maxAttempts: 1,
    deadLetter: (letter) => {
      refusedKeys.push(letter);
    },
  })
  async keyed(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.deliveries.headerKeyedRuns += 1;
    await this.orders.insert({ reference, source: 'rabbitmq' });
  }
}

@Controller()
export class DeadlockedConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly deliveries: Deliveries,
  ) {}

  @EventPattern(DEADLOCK_PATTERN)
  @Idempotent({
    acknowledge: true,
    maxAttempts: 1,
    deadLetter: (letter) => {
      deadLetters.push(letter);
    },
  })
  async deadlocked(@Payload() message: unknown) {
    const { reference } = message as { reference: string };
    this.deliveries.runs += 1;
    await this.orders.insert({ reference, source: 'rabbitmq' });
    const answer = this.deliveries.deadlockOnce.get(reference);
    if (answer) {
      this.deliveries.deadlockOnce.delete(reference);
      try {
        await this.orders.query(
          "DO $$ BEGIN RAISE EXCEPTION 'a deadlock' USING ERRCODE = '40P01'; END $$",
        );
      } catch {
        throw answer;
      }
    }
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [
    CapturesConsumer,
    PoisonConsumer,
    LargeResultConsumer,
    HeaderKeyedConsumer,
    DeadlockedConsumer,
  ],
  providers: [Deliveries],
})
export class RabbitTestModule {}
