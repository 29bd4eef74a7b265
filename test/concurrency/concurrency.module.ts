import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** The barrier handlers wait at, replaced by each test. */
@Injectable()
export class Gate {
  barrier = new Barrier();
  runs = 0;
}

@Controller('concurrency')
export class ConcurrencyController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly gate: Gate,
  ) {}

  private async handle(reference: string) {
    this.gate.runs += 1;
    const order = await this.orders.save(this.orders.create({ reference }));
    await this.gate.barrier.wait();
    return { id: order.id, reference, run: this.gate.runs };
  }

  @Post('reject')
  @Idempotent()
  reject(@Body() body: { reference: string }) {
    return this.handle(body.reference);
  }

  @Post('wait')
  @Idempotent({ concurrency: 'wait' })
  wait(@Body() body: { reference: string }) {
    return this.handle(body.reference);
  }

  @Post('wait-short')
  @Idempotent({ concurrency: 'wait', waitTimeout: '300ms', retryAfter: 2 })
  waitShort(@Body() body: { reference: string }) {
    return this.handle(body.reference);
  }

  /** The first run fails after the others queued: a waiter takes over. */
  @Post('takeover')
  @Idempotent({ concurrency: 'wait' })
  async takeover() {
    const run = ++this.gate.runs;
    if (run === 1) {
      await this.gate.barrier.wait();
      throw new ServiceUnavailableException('gateway down');
    }
    const [{ lockTimeout }] = await this.orders.query<
      Array<{ lockTimeout: string }>
    >(`SELECT current_setting('lock_timeout') AS "lockTimeout"`);
    return { run, lockTimeout };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [ConcurrencyController],
  providers: [Gate],
})
export class ConcurrencyTestModule {}
