import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { QueryRunner, Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Holds the first run between its two writes. */
@Injectable()
export class Pause {
  barrier = new Barrier();
  runs = 0;
  /** The query runner of the first run's transaction. */
  queryRunner?: QueryRunner;
}

@Controller('late')
export class LateController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly pause: Pause,
    private readonly idempotency: IdempotencyContext,
  ) {}

  /** Writes, waits (idle in its transaction), writes again. */
  @Post()
  @Idempotent({ transactionTimeout: '300ms' })
  async create(@Body() body: { reference: string }) {
    const run = ++this.pause.runs;
    await this.orders.insert({ reference: body.reference, source: 'first' });
    if (run === 1) {
      this.pause.queryRunner = this.idempotency.manager.queryRunner;
      await this.pause.barrier.wait();
    }
    await this.orders.insert({ reference: body.reference, source: 'second' });
    return { run };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [LateController],
  providers: [Pause],
})
export class LostTransactionTestModule {}
