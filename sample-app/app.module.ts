import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule } from 'nestjs-idempotency';
import { BenchModule } from './bench/bench.module.js';
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
    // Routes of `npm run bench` only; the sample itself never has them.
    ...(process.env.SAMPLE_BENCH_ROUTES === '1' ? [BenchModule] : []),
  ],
})
export class AppModule {}
