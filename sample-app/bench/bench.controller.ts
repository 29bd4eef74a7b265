import { Body, Controller, Headers, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { IdempotencyContext, Idempotent } from 'nestjs-idempotency';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../payments/create-payment.dto.js';
import { Payment } from '../payments/payment.entity.js';
import { PaymentGateway } from '../payments/payment-gateway.js';
import { PaymentsService } from '../payments/payments.service.js';

/**
 * Routes of the benchmark (`npm run bench`), registered only with
 * `SAMPLE_BENCH_ROUTES=1`: the body of `POST /payments` without its
 * recovery point (the gateway is called directly), once in a plain
 * transaction and once as an `@Idempotent()` handler, so that the two differ
 * by the idempotency module only.
 */
@Controller('bench')
export class BenchController {
  constructor(
    private readonly payments: PaymentsService,
    private readonly gateway: PaymentGateway,
    private readonly idempotency: IdempotencyContext,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  /**
   * The baseline: the payment in a plain transaction, with no idempotency.
   * The key header, when sent, only names the gateway charge.
   */
  @Post('baseline')
  baseline(
    @Body() dto: CreatePaymentDto,
    @Headers('idempotency-key') key?: string,
  ): Promise<Payment> {
    return this.dataSource.transaction(async (manager) => {
      const charge = await this.gateway.charge(
        dto.amount,
        dto.currency,
        `${key ?? randomUUID()}:charge`,
      );
      return this.payments.book(dto, charge.id, manager);
    });
  }

  /**
   * The same payment as an `@Idempotent()` handler: the injected
   * repositories write through the request's transaction.
   */
  @Post('payments')
  @Idempotent()
  async create(@Body() dto: CreatePaymentDto): Promise<Payment> {
    const charge = await this.gateway.charge(
      dto.amount,
      dto.currency,
      this.idempotency.deriveKey('charge'),
    );
    return this.payments.book(dto, charge.id);
  }
}
