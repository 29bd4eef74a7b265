import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { BenchModule } from './bench/bench.module.js';
import { PaymentsModule } from './payments/payments.module.js';
import { PaymentsDatabase } from './typeorm.options.js';

@Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
    // Routes of `npm run bench` only; the sample itself never has them.
    ...(process.env.SAMPLE_BENCH_ROUTES === '1' ? [BenchModule] : []),
  ],
})
export class AppModule {}
