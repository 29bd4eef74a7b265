import { Controller, Injectable, Module } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Subjects of this run only: other runs on the same NATS server do not interfere. */
const RUN = randomUUID().slice(0, 8);
export const SUBJECTS = {
  wait: `idempotency.test.${RUN}.wait`,
  reject: `idempotency.test.${RUN}.reject`,
  event: `idempotency.test.${RUN}.event`,
  /** A wildcard: `accounts.A`, `accounts.B`, ... reach one handler. */
  accounts: `idempotency.test.${RUN}.accounts.*`,
};

@Injectable()
export class Handlers {
  barrier = new Barrier();
  runs = 0;
}

interface PaymentMessage {
  idempotencyKey?: string;
  reference: string;
}

@Controller()
export class PaymentsConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: Handlers,
  ) {}

  private async create(message: PaymentMessage) {
    const run = ++this.handlers.runs;
    const order = await this.orders.save(
      this.orders.create({ reference: message.reference, source: 'nats' }),
    );
    await this.handlers.barrier.wait();
    return { orderId: order.id, run };
  }

  @MessagePattern(SUBJECTS.wait)
  @Idempotent({ concurrency: 'wait' })
  waitMode(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  @MessagePattern(SUBJECTS.reject)
  @Idempotent()
  rejectMode(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  @MessagePattern(SUBJECTS.accounts)
  @Idempotent()
  account(@Payload() message: PaymentMessage) {
    return this.create(message);
  }

  @EventPattern(SUBJECTS.event)
  @Idempotent()
  async paid(@Payload() message: unknown) {
    await this.create(message as PaymentMessage);
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [PaymentsConsumer],
  providers: [Handlers],
})
export class NatsTestModule {}
