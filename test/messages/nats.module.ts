import { Controller, Injectable, Module } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';
import {
  PaymentHandlers,
  SUBJECTS,
  type PaymentMessage,
} from './nats.handlers.js';

export { SUBJECTS };

@Injectable()
export class Handlers {
  barrier = new Barrier();
  runs = 0;
}

@Controller()
export class PaymentsConsumer extends PaymentHandlers {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: Handlers,
  ) {
    super();
  }

  protected async create(message: PaymentMessage) {
    const run = ++this.handlers.runs;
    const order = await this.orders.save(
      this.orders.create({ reference: message.reference, source: 'nats' }),
    );
    await this.handlers.barrier.wait();
    return { orderId: order.id, run };
  }

  @MessagePattern(SUBJECTS.accounts)
  @Idempotent()
  account(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  /** One of the two handlers of `SUBJECTS.shared`. */
  @EventPattern(SUBJECTS.shared)
  @Idempotent()
  async shared(@Payload() message: unknown) {
    await this.create(message as PaymentMessage);
  }

  /** The exact one of the two handlers an `overlap.A` event reaches. */
  @EventPattern(SUBJECTS.overlapA)
  @Idempotent()
  async overlapA(@Payload() message: unknown) {
    await this.create(message as PaymentMessage);
  }
}

/** The other handler of `SUBJECTS.shared`: a ledger of its own. */
@Controller()
export class LedgerConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: Handlers,
  ) {}

  @EventPattern(SUBJECTS.shared)
  @Idempotent()
  async booked(@Payload() message: unknown) {
    this.handlers.runs += 1;
    const { reference } = message as PaymentMessage;
    await this.orders.save(this.orders.create({ reference, source: 'ledger' }));
  }

  /** The wildcard one of the two handlers an `overlap.A` event reaches. */
  @EventPattern(SUBJECTS.overlapAll)
  @Idempotent()
  async overlapAll(@Payload() message: unknown) {
    this.handlers.runs += 1;
    const { reference } = message as PaymentMessage;
    await this.orders.save(this.orders.create({ reference, source: 'ledger' }));
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [PaymentsConsumer, LedgerConsumer],
  providers: [Handlers],
})
export class NatsTestModule {}
