import { Body, Controller, Headers, Post } from '@nestjs/common';
import { InjectDataSource, InjectRepository } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { IdempotencyContext, Idempotent } from 'nestjs-idempotency';
import type { DataSource, Repository } from 'typeorm';
import { CreatePaymentDto } from '../payments/create-payment.dto.js';
import { LedgerEntry } from '../payments/ledger-entry.entity.js';
import { Payment } from '../payments/payment.entity.js';
import { BenchPaymentsService } from './bench-payments.service.js';

/**
 * Routes of the benchmark (`npm run bench`), registered only with
 * `SAMPLE_BENCH_ROUTES=1`: the same payment, with and without idempotency.
 */
@Controller('bench')
export class BenchController {
  constructor(
    private readonly service: BenchPaymentsService,
    private readonly idempotency: IdempotencyContext,
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
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
    return this.dataSource.transaction((manager) =>
      this.service.create(
        {
          payments: manager.getRepository(Payment),
          ledger: manager.getRepository(LedgerEntry),
        },
        dto,
        `${key ?? randomUUID()}:charge`,
      ),
    );
  }

  /**
   * The same payment as an `@Idempotent()` handler, without a recovery
   * point: the injected repositories write through the request's transaction.
   */
  @Post('payments')
  @Idempotent()
  create(@Body() dto: CreatePaymentDto): Promise<Payment> {
    return this.service.create(
      { payments: this.payments, ledger: this.ledger },
      dto,
      this.idempotency.deriveKey('charge'),
    );
  }
}
