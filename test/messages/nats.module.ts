import { Controller, Injectable, Module } from '@nestjs/common';
import { MessagePattern, Payload } from '@nestjs/microservices';
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
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [PaymentsConsumer],
  providers: [Handlers],
})
export class NatsTestModule {}
