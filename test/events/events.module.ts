import {
  BadRequestException,
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  StreamableFile,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Readable } from 'node:stream';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** The barrier the `held` route waits at. */
@Injectable()
export class Runs {
  barrier = new Barrier();
}

type Payload = Record<string, unknown>;

/** One route per outcome that the module reports as an event. */
@Controller()
export class EventsController {
  constructor(
    private readonly runs: Runs,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  /** Executed once, replayed after. */
  @Post('keys/default')
  @Idempotent()
  plain(@Body() body: Payload) {
    return { body };
  }

  /** Runs without a key as well: executed, with nothing stored. */
  @Post('keys/optional')
  @Idempotent({ required: false })
  optional(@Body() body: Payload) {
    return { body };
  }

  /** Still executing while the test sends duplicates: conflict, mismatch. */
  @Post('fingerprint/held')
  @Idempotent()
  async held(@Body() body: Payload) {
    await this.orders.insert({ reference: String(body.reference) });
    await this.runs.barrier.wait();
    return { body };
  }

  /** Still executing at its deadline: abandoned, a timeout. */
  @Post('deadline')
  @Idempotent({ transactionTimeout: '300ms' })
  async deadline(@Body() body: Payload) {
    await this.orders.insert({ reference: String(body.reference) });
    await this.runs.barrier.wait();
    return { body };
  }

  /** A client error that is stored and replayed. */
  @Post('errors/declined')
  @Idempotent({ storeErrors: true })
  async declined(@Body() body: Payload): Promise<never> {
    await this.orders.insert({ reference: String(body.reference) });
    throw new BadRequestException('declined');
  }

  /** Its answer cannot be stored: its `redact` hook throws (503). */
  @Post('responses/unredactable')
  @Idempotent({
    redact: () => {
      throw new Error('the redact hook failed');
    },
  })
  async unredactable(@Body() body: Payload) {
    await this.orders.insert({ reference: String(body.reference) });
    return { body };
  }

  /** A streamed response: executed, but a duplicate cannot be replayed. */
  @Post('responses/stream')
  @Idempotent()
  async stream(@Body() body: Payload) {
    await this.orders.insert({ reference: String(body.reference) });
    return new StreamableFile(Readable.from(['chunk-1\n', 'chunk-2\n']), {
      type: 'text/plain',
    });
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [EventsController],
  providers: [Runs],
})
export class EventsTestModule {}
