import {
  Body,
  Controller,
  HttpException,
  Inject,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import {
  IdempotencyContext,
  IdempotencyDownstreamRefusedException,
  Idempotent,
  type IdempotentFetchOptions,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

const DOWNSTREAM_URL = Symbol('DOWNSTREAM_URL');

/** What the test asks of the handler, per order reference. */
@Injectable()
export class PayFaults {
  /** References whose handler fails once after its call. */
  readonly failAfterCall = new Set<string>();
  /** Runs of the handler, by reference. */
  readonly runs = new Map<string, number>();
  /** The options of the handler's call, if any. */
  call: IdempotentFetchOptions | undefined;
}

interface PayBody {
  amount: number;
  reference: string;
  /** Answer a refusal of the downstream with a 402 of the handler's own. */
  mapRefusal?: boolean;
}

@Controller('pay')
export class PayController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly idempotency: IdempotencyContext,
    private readonly faults: PayFaults,
    @Inject(DOWNSTREAM_URL) private readonly downstream: string,
  ) {}

  /** Charges through `IdempotencyContext.fetch()`, then writes the order. */
  @Post()
  @Idempotent()
  pay(@Body() body: PayBody) {
    return this.charge(body);
  }

  /** The same, with a deadline of one second. */
  @Post('short')
  @Idempotent({ transactionTimeout: '1s' })
  short(@Body() body: PayBody) {
    return this.charge(body);
  }

  /** The same, on a route where a key is optional. */
  @Post('keyless')
  @Idempotent({ required: false })
  keyless(@Body() body: PayBody) {
    return this.charge(body);
  }

  private async charge(body: PayBody) {
    const { faults } = this;
    faults.runs.set(body.reference, (faults.runs.get(body.reference) ?? 0) + 1);
    let answer: Response;
    try {
      answer = await this.idempotency.fetch(
        'charge',
        `${this.downstream}/charges`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            amount: body.amount,
            reference: body.reference,
          }),
          idempotency: faults.call,
        },
      );
    } catch (error) {
      if (
        body.mapRefusal &&
        error instanceof IdempotencyDownstreamRefusedException
      ) {
        throw new HttpException(
          {
            declined: JSON.parse(error.downstream.body) as unknown,
            status: error.downstream.status,
          },
          402,
        );
      }
      throw error;
    }
    const charge = (await answer.json()) as { id: string; amount: number };
    if (faults.failAfterCall.delete(body.reference)) {
      throw new InternalServerErrorException('failed after the charge');
    }
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: charge.id }),
    );
    return { orderId: order.id, status: answer.status, charge };
  }
}

export function outgoingModule(downstreamUrl: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Order])],
    controllers: [PayController],
    providers: [
      PayFaults,
      { provide: DOWNSTREAM_URL, useValue: downstreamUrl },
    ],
  })
  class OutgoingTestModule {}
  return OutgoingTestModule;
}
