import {
  Body,
  Controller,
  Inject,
  Injectable,
  InternalServerErrorException,
  Module,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { requestCharge } from '../utils/fake-gateway.js';
import { Barrier } from '../utils/barrier.js';

export const GATEWAY_URL = Symbol('GATEWAY_URL');

/** Makes the handler fail once, after its charge step. */
@Injectable()
export class Faults {
  failAfterCharge = false;
  runs = 0;
  /** Where the charge of `/checkout/held` waits, after calling the gateway. */
  readonly charged = new Barrier();
  /** Where `/checkout/paused` waits, before its charge step. */
  readonly beforeCharge = new Barrier();
  /**
   * Where `/checkout/two-steps` and `/checkout/hung` wait between their
   * steps, on their first run: a test sets a new one.
   */
  betweenSteps = new Barrier();
  /** How the second step of `/checkout/two-steps` or `/checkout/hung` ended, by run. */
  readonly secondSteps: string[] = [];
  /** Where the first run of `/checkout/short` waits: a test sets a new one. */
  shortHold = new Barrier();
  /** The charges of `/checkout/short`, with the keys they were sent under. */
  readonly shortCharges: string[] = [];
  /** Where the second run of `/checkout/resumed` waits between its steps. */
  lateRead = new Barrier();
}

@Controller('checkout')
export class CheckoutController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly idempotency: IdempotencyContext,
    private readonly faults: Faults,
    @Inject(GATEWAY_URL) private readonly gatewayUrl: string,
  ) {}

  @Post()
  @Idempotent()
  async checkout(@Body() body: { amount: number; reference: string }) {
    this.faults.runs += 1;
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        body.amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    if (this.faults.failAfterCharge) {
      this.faults.failAfterCharge = false;
      throw new InternalServerErrorException(
        'lost the database after charging',
      );
    }
    const receipt = await this.idempotency.step(
      'receipt',
      () => `receipt-for-${charge.id}`,
    );
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: charge.id }),
    );
    return { orderId: order.id, charge, receipt };
  }

  /** Writes first, then charges: the step runs in an open transaction. */
  @Post('late')
  @Idempotent()
  async late(@Body() body: { amount: number; reference: string }) {
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: 'late' }),
    );
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        body.amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    return { orderId: order.id, charge };
  }

  /** Waits for the test, then charges. */
  @Post('paused')
  @Idempotent()
  async paused(@Body() body: { amount: number; reference: string }) {
    await this.faults.beforeCharge.wait();
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        body.amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    return { charge };
  }

  /** Reserves, waits for the test, then charges: a step after a step. */
  @Post('two-steps')
  @Idempotent()
  twoSteps(@Body() body: { amount: number; reference: string }) {
    return this.stepAfterStep(body);
  }

  /**
   * As `two-steps`, abandoned after 3 s: its retry's work (a step read, a
   * charge, a step saved, an order) must fit in the same deadline on a
   * busy machine.
   */
  @Post('hung')
  @Idempotent({ transactionTimeout: '3s' })
  hung(@Body() body: { amount: number; reference: string }) {
    return this.stepAfterStep(body);
  }

  private async stepAfterStep(body: { amount: number; reference: string }) {
    this.faults.runs += 1;
    const run = this.faults.runs;
    const reserved = await this.idempotency.step('reserve', () => run);
    if (run === 1) {
      await this.faults.betweenSteps.wait();
    }
    let charge: { id: string };
    try {
      charge = await this.idempotency.step('charge', () =>
        requestCharge(
          this.gatewayUrl,
          body.amount,
          this.idempotency.deriveKey('charge'),
        ),
      );
    } catch (error) {
      this.faults.secondSteps.push(
        `${run}: ${(error as Error).constructor.name}`,
      );
      throw error;
    }
    this.faults.secondSteps.push(`${run}: charged`);
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: charge.id }),
    );
    return { orderId: order.id, charge, reserved };
  }

  /**
   * Charges in a step, with a `ttl` shorter than the handler's time. Its
   * first run waits at `shortHold` after the charge, then fails
   * (`hold: 'after'`), or in the step, before its result is saved
   * (`hold: 'in'`, abandoned at 2 s).
   */
  @Post('short')
  @Idempotent({ ttl: '1s', transactionTimeout: '2s' })
  async short(@Body() body: { amount: number; hold: 'after' | 'in' }) {
    this.faults.runs += 1;
    const run = this.faults.runs;
    const charge = await this.idempotency.step('charge', async () => {
      const key = this.idempotency.deriveKey('charge');
      this.faults.shortCharges.push(key);
      const result = await requestCharge(this.gatewayUrl, body.amount, key);
      if (run === 1 && body.hold === 'in') {
        await this.faults.shortHold.wait();
      }
      return result;
    });
    if (run === 1 && body.hold === 'after') {
      await this.faults.shortHold.wait();
      throw new InternalServerErrorException('failed after the charge');
    }
    return { charge, run };
  }

  /**
   * Two steps, with a `ttl` shorter than the handler's time: its first run
   * fails after both, its second waits at `lateRead` between them (a
   * retry that took the key over and reads its steps late).
   */
  @Post('resumed')
  @Idempotent({ ttl: '300ms', transactionTimeout: '3s' })
  async resumed(@Body() body: { amount: number }) {
    this.faults.runs += 1;
    const run = this.faults.runs;
    const reserved = await this.idempotency.step('reserve', () => run);
    if (run === 2) {
      await this.faults.lateRead.wait();
    }
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        body.amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    if (run === 1) {
      throw new InternalServerErrorException('failed after its steps');
    }
    return { charge, reserved, run };
  }

  /** Charges, and waits for the test before the step's result is saved. */
  @Post('held')
  @Idempotent()
  async held(@Body() body: { amount: number; reference: string }) {
    const charge = await this.idempotency.step('charge', async () => {
      const result = await requestCharge(
        this.gatewayUrl,
        body.amount,
        this.idempotency.deriveKey('charge'),
      );
      await this.faults.charged.wait();
      return result;
    });
    const order = await this.orders.save(
      this.orders.create({ reference: body.reference, source: charge.id }),
    );
    return { orderId: order.id, charge };
  }
}

export function stepsModule(gatewayUrl: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Order])],
    controllers: [CheckoutController],
    providers: [Faults, { provide: GATEWAY_URL, useValue: gatewayUrl }],
  })
  class StepsTestModule {}
  return StepsTestModule;
}
