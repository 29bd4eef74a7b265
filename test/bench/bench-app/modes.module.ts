import { Module, type DynamicModule, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LedgerEntry } from '../../../sample-app/payments/ledger-entry.entity.js';
import { Payment } from '../../../sample-app/payments/payment.entity.js';
import { PaymentsDatabase } from '../../../sample-app/typeorm.options.js';
import { AppStateController } from './app-state.controller.js';
import { InFlight } from './in-flight.js';
import { ModesHandler } from './modes.handler.js';
import { PoolGauge } from './pool-gauge.js';

/**
 * The application of one mode of the modes bench: the sample's database
 * (its migrations, the module's included), the payments' repositories and
 * gateway stand-in, the one handler, and `controller`, the mode's routes;
 * `imports` adds the mode's idempotency library, if it has one.
 */
@Module({})
export class ModesAppModule {
  static forMode(
    controller: Type,
    imports: DynamicModule[] = [],
  ): DynamicModule {
    return {
      module: ModesAppModule,
      imports: [
        PaymentsDatabase,
        TypeOrmModule.forFeature([Payment, LedgerEntry]),
        ...imports,
      ],
      controllers: [controller, AppStateController],
      providers: [
        ModesHandler,
        PoolGauge,
        InFlight,
        { provide: APP_INTERCEPTOR, useExisting: InFlight },
      ],
    };
  }
}
