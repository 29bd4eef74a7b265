import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent, type IdempotencyModuleOptions } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** Stands for an application's configuration service. */
@Injectable()
export class SettingsService {
  readonly idempotencyTtl = '2h';
}

@Module({ providers: [SettingsService], exports: [SettingsService] })
export class SettingsModule {}

/** An options factory class, for `useClass` / `useExisting`. */
@Injectable()
export class IdempotencyConfig {
  createIdempotencyOptions(): IdempotencyModuleOptions {
    return { ttl: '3h' };
  }
}

@Module({ providers: [IdempotencyConfig], exports: [IdempotencyConfig] })
export class IdempotencyConfigModule {}

/** A decorated route that writes through a repository of the named DataSource `name`. */
export function ordersModule(dataSourceName?: string) {
  @Controller('orders')
  class OrdersController {
    constructor(
      @InjectRepository(Order, dataSourceName)
      readonly orders: Repository<Order>,
    ) {}

    @Post()
    @Idempotent()
    async create(@Body() body: { reference: string }) {
      return this.orders.save(
        this.orders.create({ reference: body.reference }),
      );
    }
  }

  @Module({
    imports: [TypeOrmModule.forFeature([Order], dataSourceName)],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return OrdersModule;
}
