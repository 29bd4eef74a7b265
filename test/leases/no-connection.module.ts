import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Where handlers wait before their first statement. */
@Injectable()
export class Gate {
  readonly barrier = new Barrier();
}

@Controller('no-connection')
export class NoConnectionController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
  ) {}

  /** Waits (e.g. on a gateway) before it touches the database, then writes. */
  @Post()
  @Idempotent()
  async create(@Body() body: { reference: string }) {
    await this.gate.barrier.wait();
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference }),
    );
    return { id: order.id, reference: order.reference };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [NoConnectionController],
  providers: [Gate],
})
export class NoConnectionTestModule {}
