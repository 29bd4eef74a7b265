import { Body, Controller, Headers, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import type { Payment } from '../../../sample-app/payments/payment.entity.js';
import { BenchController, plainKey } from './bench.controller.js';

/** The answer of the no-op routes. */
export interface NoopAnswer {
  readonly id: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'accepted';
}

let noops = 0;

/** What the no-op routes answer: the request's payment, accepted, nothing written. */
export function noopAnswer(dto: CreatePaymentDto): NoopAnswer {
  noops += 1;
  return {
    id: `noop_${noops}`,
    amount: dto.amount,
    currency: dto.currency,
    status: 'accepted',
  };
}

/** How long the gateway of the gateway routes takes to answer (ms). */
const GATEWAY_MS = Number(process.env.BENCH_GATEWAY_MS ?? 50);

/**
 * The bench's routes on a store other than PostgreSQL. That store's record
 * cannot commit with the handler's writes, and the module gives no
 * transaction: its idempotent routes do exactly what their baselines do
 * (the gateway, then the payment in a short transaction of their own), with
 * `@Idempotent()` on top, so that what they cost more is the module only.
 * The charge's key is the baseline's too (the request's key, with a suffix),
 * as in the handler of `@node-idempotency/nestjs` that the bench compares.
 * The other routes are {@link BenchController}'s.
 */
@Controller('bench')
export class StoresBenchController extends BenchController {
  /** The baseline, with `@Idempotent()`. */
  @Post('payments')
  @Idempotent()
  override async create(
    @Body() dto: CreatePaymentDto,
    @Headers('idempotency-key') key?: string,
  ): Promise<Payment> {
    const charge = await this.charge(dto, plainKey(key), 0);
    return this.book(dto, charge);
  }

  /**
   * Answers at once, writing nothing: what a request costs the module
   * itself, against {@link noopBaseline} and the other library's no-op.
   */
  @Post('noop')
  @Idempotent()
  noop(@Body() dto: CreatePaymentDto): NoopAnswer {
    return noopAnswer(dto);
  }

  /** The no-op without idempotency. */
  @Post('noop-baseline')
  noopBaseline(@Body() dto: CreatePaymentDto): NoopAnswer {
    return noopAnswer(dto);
  }

  /** The gateway baseline, with `@Idempotent()`. */
  @Post('gateway')
  @Idempotent()
  override async gatewayPayment(
    @Body() dto: CreatePaymentDto,
    @Headers('idempotency-key') key?: string,
  ): Promise<Payment> {
    const charge = await this.charge(dto, plainKey(key), GATEWAY_MS);
    return this.book(dto, charge);
  }
}
