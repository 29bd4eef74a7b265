import { Module, type DynamicModule, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { IdempotencyModule } from 'nestjs-idempotency';
import type { IdempotencyStoreOption } from 'nestjs-idempotency/store';
import { PaymentsModule } from '../../../sample-app/payments/payments.module.js';
import { PaymentsDatabase } from '../../../sample-app/typeorm.options.js';
import { InFlight } from './in-flight.js';
import { PoolGauge } from './pool-gauge.js';
import { StoresBenchController } from './stores.controller.js';

/**
 * The application of the stores bench on a store other than PostgreSQL:
 * the sample's database and payments (the handlers still write them, in
 * transactions of their own), the idempotency module on `store` with the
 * sample's options, and the bench's routes; `more` adds modules and
 * controllers (the other library's, side by side).
 */
@Module({})
export class StoresBenchAppModule {
  static forStore(
    store: IdempotencyStoreOption,
    more: { imports?: DynamicModule[]; controllers?: Type[] } = {},
  ): DynamicModule {
    return {
      module: StoresBenchAppModule,
      imports: [
        PaymentsDatabase,
        IdempotencyModule.forRoot({ ttl: '24h', store }),
        PaymentsModule,
        ...(more.imports ?? []),
      ],
      controllers: [StoresBenchController, ...(more.controllers ?? [])],
      providers: [
        PoolGauge,
        InFlight,
        { provide: APP_INTERCEPTOR, useExisting: InFlight },
      ],
    };
  }
}
