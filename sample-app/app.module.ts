import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyModule, idempotencyMigrations } from 'nestjs-idempotency';
import { Database } from './database.js';
import { DatabaseModule } from './database.module.js';
import { CreatePayments1764000000100 } from './migrations/1764000000100-create-payments.js';
import { AddChargeId1764000000101 } from './migrations/1764000000101-add-charge-id.js';
import { LedgerEntry } from './payments/ledger-entry.entity.js';
import { Payment } from './payments/payment.entity.js';
import { PaymentsModule } from './payments/payments.module.js';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      // Starts (or finds) the database before TypeORM connects to it.
      imports: [DatabaseModule],
      inject: [Database],
      useFactory: (database: Database) => ({
        type: 'postgres',
        url: database.url,
        entities: [Payment, LedgerEntry],
        migrations: [
          ...idempotencyMigrations,
          CreatePayments1764000000100,
          AddChargeId1764000000101,
        ],
        migrationsRun: true,
        synchronize: false,
      }),
    }),
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
  ],
})
export class AppModule {}
