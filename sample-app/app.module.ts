import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nestjs-idempotency';
import { Database } from './database.js';
import { DatabaseModule } from './database.module.js';
import { PaymentsModule } from './payments/payments.module.js';
import { typeOrmOptions } from './typeorm.options.js';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      // Starts (or finds) the database before TypeORM connects to it.
      imports: [DatabaseModule],
      inject: [Database],
      useFactory: typeOrmOptions,
    }),
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
  ],
})
export class AppModule {}
