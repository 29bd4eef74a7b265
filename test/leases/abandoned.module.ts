import {
  Body,
  Controller,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
} from '@nestjs/common';
import { IdempotencyContext, Idempotent } from '../../src/index.js';

/** How many times the handler ran. */
@Injectable()
export class Runs {
  count = 0;
}

@Controller('abandoned')
export class AbandonedController {
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly runs: Runs,
  ) {}

  /**
   * Charges (a recovery point), then fails before writing anything: the
   * charge is a side effect without the request's own writes. A short time
   * to live and deadline, so that its step is abandoned (its key's binding
   * over, 1 ms after the deadline) a second after the request, and
   * collected.
   */
  @Post()
  @Idempotent({ ttl: '1ms', transactionTimeout: '1s' })
  async pay(@Body() body: { reference: string; amount: number }) {
    this.runs.count += 1;
    await this.idempotency.step('charge', () => ({
      id: `ch_${body.reference}`,
      amount: body.amount,
    }));
    throw new InternalServerErrorException('the ledger is down');
  }
}

@Module({ controllers: [AbandonedController], providers: [Runs] })
export class AbandonedTestModule {}
