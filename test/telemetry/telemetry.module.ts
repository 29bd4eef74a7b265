import {
  Body,
  Controller,
  HttpException,
  type ExecutionContext,
  Injectable,
  Module,
  Move,
  Param,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { trace } from '@opentelemetry/api';
import { createHash, randomUUID } from 'node:crypto';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Request header the app's scope resolver reads: a user id. */
export const USER_HEADER = 'x-user';

/** The scope of a request: its user (the `scope` option of the specs' apps). */
export const userScope = (context: ExecutionContext): string =>
  String(
    context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>()
      .headers[USER_HEADER],
  );

/** A key as the module hashes it for spans and log lines. */
export const keyHash = (key: string): string =>
  createHash('sha256').update(key).digest('hex').slice(0, 16);

/** The barrier the `held` route waits at. */
@Injectable()
export class Gate {
  barrier = new Barrier();
}

interface Payload {
  reference: string;
}

/** One route per outcome whose spans and metrics the spec reads. */
@Controller('telemetry')
export class TelemetryController {
  constructor(
    private readonly gate: Gate,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  /**
   * Executed once, replayed after. Its insert is a span of its own, which
   * must be a child of the handler's.
   */
  @Post('orders')
  @Idempotent()
  create(@Body() body: Payload) {
    return trace
      .getTracer('test-app')
      .startActiveSpan('orders.insert', async (span) => {
        try {
          await this.orders.insert({ reference: body.reference });
        } finally {
          span.end();
        }
        // Another on every execution: a replay returns this very one.
        return { reference: body.reference, receipt: randomUUID() };
      });
  }

  /** Still executing while the spec sends a duplicate: a conflict. */
  @Post('held')
  @Idempotent()
  async held(@Body() body: Payload) {
    await this.orders.insert({ reference: body.reference });
    await this.gate.barrier.wait();
    return { reference: body.reference };
  }

  /** Writes, then fails: the writes roll back and nothing is stored. */
  @Post('declined')
  @Idempotent()
  async declined(@Body() body: Payload): Promise<never> {
    await this.orders.insert({ reference: body.reference });
    throw new HttpException('card declined', 402);
  }

  /** A request of a WebDAV method that changes state: an HTTP request too. */
  @Move('files/:name')
  @Idempotent()
  async move(@Param('name') name: string) {
    await this.orders.insert({ reference: name });
    return { moved: name };
  }

  /**
   * Writes, then catches the failure of a statement of its own and returns:
   * its transaction is aborted, nothing commits, and the client gets a 500.
   */
  @Post('swallowed')
  @Idempotent()
  async swallowed(@Body() body: Payload) {
    await this.orders.insert({ reference: body.reference });
    await this.orders.query('SELECT 1 / 0').catch(() => undefined);
    return { reference: body.reference };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [TelemetryController],
  providers: [Gate],
})
export class TelemetryTestModule {}
