import { Body, Controller, Get, Module, Post } from '@nestjs/common';
import {
  InjectDataSource,
  InjectRepository,
  TypeOrmModule,
} from '@nestjs/typeorm';
import type { DataSource, Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

@Controller()
export class UntouchedController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Get('health')
  health() {
    return { ok: true };
  }

  @Post('plain')
  async plain(@Body() body: { reference: string }) {
    await this.orders.insert({ reference: body.reference });
    return { ok: true };
  }

  /** The same write in a transaction of the application's own: the baseline. */
  @Post('baseline')
  async baseline(@Body() body: { reference: string }) {
    await this.dataSource.transaction((manager) =>
      manager.insert(Order, { reference: body.reference }),
    );
    return { ok: true };
  }

  @Post('decorated')
  @Idempotent()
  async decorated(@Body() body: { reference: string }) {
    await this.orders.insert({ reference: body.reference });
    return { ok: true };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [UntouchedController],
})
export class UntouchedTestModule {}
