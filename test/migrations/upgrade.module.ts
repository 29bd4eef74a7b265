import { Body, Controller, Header, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** The routes whose records a database of 0.1.0 holds. */
@Controller('upgrade')
export class UpgradeController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post('orders')
  @Idempotent()
  @Header('X-Order-Version', '2')
  async create(@Body() body: { reference: string }) {
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: 'upgraded' }),
    );
    return { id: order.id, reference: order.reference };
  }

  /** Resumes after a charge step, as 0.1.0's handler did. */
  @Post('checkout')
  @Idempotent()
  async checkout(@Body() body: { reference: string }) {
    const charge = await this.idempotency.step('charge', () => ({
      id: `ch_new_${body.reference}`,
    }));
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: charge.id }),
    );
    return { id: order.id, charge: charge.id };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [UpgradeController],
})
export class UpgradeTestModule {}
