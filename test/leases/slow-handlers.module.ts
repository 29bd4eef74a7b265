import { Body, Controller, Module, Post } from '@nestjs/common';
import { setTimeout as delay } from 'node:timers/promises';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** How long each handler waits (a slow downstream call) before it writes. */
export const HANDLER_WAIT_MS = 1_000;

@Controller('slow-handlers')
export class SlowHandlersController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  /** A second of waiting on something else (the point here is time), then a write. */
  @Post()
  @Idempotent()
  async create(@Body() body: { reference: string }) {
    await delay(HANDLER_WAIT_MS);
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference }),
    );
    return { id: order.id, reference: order.reference };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [SlowHandlersController],
})
export class SlowHandlersTestModule {}
