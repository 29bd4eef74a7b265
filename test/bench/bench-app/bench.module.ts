import { Module } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { AppModule } from '../../../sample-app/app.module.js';
import { PaymentsModule } from '../../../sample-app/payments/payments.module.js';
import { BenchController } from './bench.controller.js';
import { InFlight } from './in-flight.js';
import { PoolGauge } from './pool-gauge.js';

/**
 * The application `npm run bench` drives: the sample app as it is (its
 * database, its idempotency module, its `POST /payments`) plus the routes of
 * the benchmark, which the sample itself never has.
 */
@Module({
  imports: [AppModule, PaymentsModule],
  controllers: [BenchController],
  providers: [
    PoolGauge,
    InFlight,
    { provide: APP_INTERCEPTOR, useExisting: InFlight },
  ],
})
export class BenchAppModule {}
