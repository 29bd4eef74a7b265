import {
  Body,
  Controller,
  Inject,
  Injectable,
  Module,
  Post,
  UseGuards,
  type CanActivate,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { requestCharge } from '../utils/fake-gateway.js';
import { Barrier } from '../utils/barrier.js';

const GATEWAY_URL = Symbol('GATEWAY_URL');

/** Where the test holds the requests: at the door, and inside the handler. */
@Injectable()
export class Gates {
  /** Requests that reached the controller (guards run before interceptors). */
  arrived = 0;
  /** Handlers of `POST /checkout` that wrote their order (their transaction is open). */
  written = 0;
  /** Handlers of `POST /checkout` wait here, in their transaction, before their charge step. */
  readonly beforeStep = new Barrier();
  /** Handlers of `POST /checkout/later` wait here, before their first statement. */
  readonly beforeFirstStatement = new Barrier();
}

@Injectable()
class CountArrivals implements CanActivate {
  constructor(private readonly gates: Gates) {}

  canActivate(): boolean {
    this.gates.arrived += 1;
    return true;
  }
}

@Controller('checkout')
@UseGuards(CountArrivals)
export class PoolCheckoutController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly idempotency: IdempotencyContext,
    private readonly gates: Gates,
    @Inject(GATEWAY_URL) private readonly gatewayUrl: string,
  ) {}

  /**
   * Writes first (its transaction begins), then charges in a step, whose
   * statements need another connection of the pool while the transaction
   * holds its own.
   */
  @Post()
  @Idempotent()
  async checkout(@Body() body: { amount: number; reference: string }) {
    await this.orders.insert({ reference: body.reference, source: 'pending' });
    this.gates.written += 1;
    await this.gates.beforeStep.wait();
    const charge = await this.charge(body.amount);
    await this.orders.update(
      { reference: body.reference },
      { source: charge.id },
    );
    return { charge: charge.id };
  }

  /** Waits, then charges in a step, then writes: no connection until then. */
  @Post('later')
  @Idempotent()
  async checkoutLater(@Body() body: { amount: number; reference: string }) {
    await this.gates.beforeFirstStatement.wait();
    const charge = await this.charge(body.amount);
    await this.orders.insert({ reference: body.reference, source: charge.id });
    return { charge: charge.id };
  }

  private charge(amount: number) {
    return this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
  }
}

/** Checkouts with a gateway step, for the full-pool tests. */
export function poolModule(gatewayUrl: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Order])],
    controllers: [PoolCheckoutController],
    providers: [
      Gates,
      CountArrivals,
      { provide: GATEWAY_URL, useValue: gatewayUrl },
    ],
  })
  class PoolTestModule {}
  return PoolTestModule;
}
