import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  Res,
} from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Holds the first run inside the handler, past the transaction timeout. */
@Injectable()
export class Hang {
  readonly barrier = new Barrier();
  runs = 0;
  /** For the client that leaves: held until the test opens it. */
  readonly left = new Barrier();
  readonly clientGone = new Barrier();
  abandonedRuns = 0;
}

@Controller('slow')
export class SlowController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly hang: Hang,
  ) {}

  @Post()
  @Idempotent({ transactionTimeout: '500ms' })
  async create(@Body() body: { reference: string }) {
    const run = ++this.hang.runs;
    await this.orders.insert({
      reference: body.reference,
      source: `run-${run}`,
    });
    if (run === 1) {
      await this.hang.barrier.wait();
    }
    return { run };
  }

  @Post('abandoned')
  @Idempotent()
  async abandoned(
    @Body() body: { reference: string },
    // Express' response is a ServerResponse; Fastify's reply wraps one.
    @Res({ passthrough: true }) response: { raw?: ServerResponse },
  ) {
    const run = ++this.hang.abandonedRuns;
    const raw = response.raw ?? (response as ServerResponse);
    raw.once('close', () => void this.hang.clientGone.wait());
    await this.orders.insert({
      reference: body.reference,
      source: `run-${run}`,
    });
    if (run === 1) {
      await this.hang.left.wait();
    }
    return { run };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [SlowController],
  providers: [Hang],
})
export class TimeoutTestModule {}
