import { Module } from '@nestjs/common';
import { AppModule } from '../../../sample-app/app.module.js';
import { PaymentsModule } from '../../../sample-app/payments/payments.module.js';
import { BenchController } from './bench.controller.js';
import { PoolGauge } from './pool-gauge.js';

/**
 * The application `npm run bench` drives: the sample app as it is (its
 * database, its idempotency module, its `POST /payments`) plus the routes of
 * the benchmark, which the sample itself never has.
 */
@Module({
  imports: [AppModule, PaymentsModule],
  controllers: [BenchController],
  providers: [PoolGauge],
})
export class BenchAppModule {}
