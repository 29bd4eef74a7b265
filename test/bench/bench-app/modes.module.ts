import { Module, type DynamicModule, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { AppStateController } from './app-state.controller.js';
import { Booking, type DataLibrary } from './data-library.js';
import { InFlight } from './in-flight.js';
import { ModesHandler } from './modes.handler.js';
import { PoolGauge } from './pool-gauge.js';

/**
 * The application of one mode of the modes bench: the data `library`'s
 * client on the sample's database, the one handler writing with `booking`
 * (one of the library's), and `controller`, the mode's routes; `imports`
 * adds the mode's idempotency library, if it has one.
 */
@Module({})
export class ModesAppModule {
  static forMode(
    library: DataLibrary,
    booking: Type<Booking>,
    controller: Type,
    imports: DynamicModule[] = [],
  ): DynamicModule {
    return {
      module: ModesAppModule,
      imports: [...(library.imports ?? []), ...imports],
      controllers: [controller, AppStateController],
      providers: [
        ...library.providers,
        { provide: Booking, useClass: booking },
        ModesHandler,
        PoolGauge,
        InFlight,
        { provide: APP_INTERCEPTOR, useExisting: InFlight },
      ],
    };
  }
}
