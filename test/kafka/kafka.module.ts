import { Controller, Injectable, Module } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import {
  Idempotent,
  IdempotencyService,
  type IdempotencyDeadLetter,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

export const TOPIC = 'payments';
/** A topic whose handler leaves the offsets to kafkajs's auto-commit. */
export const AUTO_TOPIC = 'ledger';
/** A topic whose handler acknowledges, with no dead-letter path. */
export const REFUNDS_TOPIC = 'refunds';
/** A topic whose handler takes keys of at most 12 characters. */
export const RECEIPTS_TOPIC = 'receipts';

/** What the route's dead-letter path was handed, in order. */
export const deadLetters: IdempotencyDeadLetter[] = [];

/** What the producers of the Kafka suites send. */
export interface PaymentEvent {
  reference: string;
  /** How many of its deliveries fail before one succeeds (or all: `'always'`). */
  failures?: number | 'always';
  /**
   * A statement the handler makes in a nested `run()` under this key, whose
   * result is over `maxResponseSize` (1 MiB): the key's next `run()` is
   * refused as not replayable.
   */
  statement?: string;
}

@Injectable()
export class KafkaHandlers {
  runs = 0;
  /** Deliveries of each reference so far. */
  readonly deliveries = new Map<string, number>();

  /** Fails the delivery of `event` while the event says so. */
  fail(event: PaymentEvent): void {
    const delivery = (this.deliveries.get(event.reference) ?? 0) + 1;
    this.deliveries.set(event.reference, delivery);
    if (event.failures === 'always' || delivery <= (event.failures ?? 0)) {
      throw new Error(`delivery ${delivery} of ${event.reference} failed`);
    }
  }
}

/** A Kafka consumer of the Nest transport: payments, in the message's transaction. */
@Controller()
export class PaymentsKafkaConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: KafkaHandlers,
    private readonly idempotency: IdempotencyService,
  ) {}

  @EventPattern(TOPIC)
  @Idempotent({
    acknowledge: true,
    // A store that does not answer its count of failures settles the
    // message failed by then.
    transactionTimeout: '5s',
    maxAttempts: 3,
    deadLetter: (letter) => {
      deadLetters.push(letter);
    },
  })
  async paid(@Payload() event: PaymentEvent): Promise<void> {
    this.handlers.runs += 1;
    await this.orders.save(
      this.orders.create({ reference: event.reference, source: 'kafka' }),
    );
    if (event.statement) {
      await this.idempotency.run(
        { key: event.statement, scope: 'statements' },
        () => Promise.resolve('x'.repeat(1_100_000)),
      );
    }
    this.handlers.fail(event);
  }
}

/** A consumer that acknowledges, with no dead-letter path. */
@Controller()
export class RefundsKafkaConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: KafkaHandlers,
  ) {}

  @EventPattern(REFUNDS_TOPIC)
  @Idempotent({ acknowledge: true })
  async refunded(@Payload() event: PaymentEvent): Promise<void> {
    this.handlers.runs += 1;
    await this.orders.save(
      this.orders.create({ reference: event.reference, source: 'kafka' }),
    );
  }
}

/** A consumer that does not acknowledge: kafkajs commits its offsets. */
@Controller()
export class LedgerKafkaConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @EventPattern(AUTO_TOPIC)
  @Idempotent()
  async booked(@Payload() event: PaymentEvent): Promise<void> {
    await this.orders.save(
      this.orders.create({ reference: event.reference, source: 'kafka' }),
    );
  }
}

/**
 * A second handler of the same topic (Nest runs both with each message):
 * without a key header each keys the message by its own name and the
 * message's place in the log, so that each processes it once.
 */
@Controller()
export class AuditKafkaConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @EventPattern(AUTO_TOPIC)
  @Idempotent()
  async audited(@Payload() event: PaymentEvent): Promise<void> {
    await this.orders.save(
      this.orders.create({
        reference: `audit:${event.reference}`,
        source: 'kafka',
      }),
    );
  }
}

/**
 * A consumer whose key rules are tight (client keys of at most 12
 * characters): they are the producers', never applied to a message's place
 * in the log, which the module makes.
 */
@Controller()
export class ReceiptsKafkaConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: KafkaHandlers,
  ) {}

  @EventPattern(RECEIPTS_TOPIC)
  @Idempotent({ acknowledge: true, keyValidation: { maxLength: 12 } })
  async received(@Payload() event: PaymentEvent): Promise<void> {
    this.handlers.runs += 1;
    await this.orders.save(
      this.orders.create({ reference: event.reference, source: 'kafka' }),
    );
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [
    PaymentsKafkaConsumer,
    RefundsKafkaConsumer,
    LedgerKafkaConsumer,
    AuditKafkaConsumer,
    ReceiptsKafkaConsumer,
  ],
  providers: [KafkaHandlers],
})
export class KafkaTestModule {}
