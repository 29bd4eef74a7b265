import { Controller, Injectable, Module } from '@nestjs/common';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Subjects of this run only. */
const RUN = randomUUID().slice(0, 8);
export const KEY_SUBJECTS = {
  keyed: `idempotency.keys.${RUN}.keyed`,
  optional: `idempotency.keys.${RUN}.optional`,
  failing: `idempotency.keys.${RUN}.failing`,
  slow: `idempotency.keys.${RUN}.slow`,
  byOption: `idempotency.keys.${RUN}.by-option`,
};

@Injectable()
export class KeyHandlers {
  barrier = new Barrier();
  runs = 0;
}

interface OrderMessage {
  reference: string;
}

/** Handlers whose key comes from a header, or that need none. */
@Controller()
export class KeyedConsumer {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly handlers: KeyHandlers,
  ) {}

  private async create(message: OrderMessage) {
    const run = ++this.handlers.runs;
    const order = await this.orders.save(
      this.orders.create({ reference: message.reference, source: 'nats' }),
    );
    return { orderId: order.id, run };
  }

  @MessagePattern(KEY_SUBJECTS.keyed)
  @Idempotent()
  keyed(@Payload() message: OrderMessage) {
    return this.create(message);
  }

  @MessagePattern(KEY_SUBJECTS.optional)
  @Idempotent({ required: false })
  optional(@Payload() message: OrderMessage) {
    return this.create(message);
  }

  /** Keyed by the `key` option: the data's `paymentId`. */
  @MessagePattern(KEY_SUBJECTS.byOption)
  @Idempotent({
    key: (context) =>
      context.switchToRpc().getData<{ paymentId?: string }>().paymentId,
  })
  byOption(@Payload() message: OrderMessage) {
    return this.create(message);
  }

  /** Writes its row, then fails: nothing of it may commit. */
  @MessagePattern(KEY_SUBJECTS.failing)
  @Idempotent({ required: false })
  async failing(@Payload() message: OrderMessage) {
    await this.create(message);
    throw new Error('the gateway refused');
  }

  /** Writes its row, then waits past its deadline. */
  @MessagePattern(KEY_SUBJECTS.slow)
  @Idempotent({ required: false, transactionTimeout: '300ms' })
  async slow(@Payload() message: OrderMessage) {
    const created = await this.create(message);
    await this.handlers.barrier.wait();
    return created;
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [KeyedConsumer],
  providers: [KeyHandlers],
})
export class KeysTestModule {}
