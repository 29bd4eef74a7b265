import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LedgerEntry } from '../payments/ledger-entry.entity.js';
import { Payment } from '../payments/payment.entity.js';
import { PaymentGateway } from '../payments/payment-gateway.js';
import { BenchController } from './bench.controller.js';
import { BenchPaymentsService } from './bench-payments.service.js';

/**
 * Benchmark-only routes (`POST /bench/baseline`, `POST /bench/payments`),
 * imported by the sample's `AppModule` only when `SAMPLE_BENCH_ROUTES=1`.
 */
@Module({
  imports: [TypeOrmModule.forFeature([Payment, LedgerEntry])],
  controllers: [BenchController],
  providers: [BenchPaymentsService, PaymentGateway],
})
export class BenchModule {}
