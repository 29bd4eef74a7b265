import { Module } from '@nestjs/common';
import { PaymentsModule } from '../payments/payments.module.js';
import { BenchController } from './bench.controller.js';

/**
 * Benchmark-only routes (`POST /bench/baseline`, `POST /bench/payments`),
 * imported by the sample's `AppModule` only when `SAMPLE_BENCH_ROUTES=1`.
 */
@Module({
  imports: [PaymentsModule],
  controllers: [BenchController],
})
export class BenchModule {}
