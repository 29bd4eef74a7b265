import { TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { idempotencyMigrations } from 'nestjs-idempotency/migrations';
import { Database } from './database.js';
import { DatabaseModule } from './database.module.js';
import { poolSettings } from './pool-settings.js';
import { CreatePayments1764000000100 } from './migrations/1764000000100-create-payments.js';
import { AddChargeId1764000000101 } from './migrations/1764000000101-add-charge-id.js';
import { CreatePaymentConfirmations1764000000102 } from './migrations/1764000000102-create-payment-confirmations.js';
import { LedgerEntry } from './payments/ledger-entry.entity.js';
import { Payment } from './payments/payment.entity.js';
import { PaymentConfirmation } from './webhooks/payment-confirmation.entity.js';

/** The module's migrations run next to the app's own. */
function typeOrmOptions(database: Database): TypeOrmModuleOptions {
  return {
    type: 'postgres',
    url: database.url,
    entities: [Payment, LedgerEntry, PaymentConfirmation],
    migrations: [
      ...idempotencyMigrations,
      CreatePayments1764000000100,
      AddChargeId1764000000101,
      CreatePaymentConfirmations1764000000102,
    ],
    migrationsRun: true,
    synchronize: false,
    // Connections per process (`DATABASE_POOL_SIZE`, default 10). The
    // idempotency module keeps one of them free for the commits of steps.
    extra: poolSettings(),
  };
}

/**
 * The connection both entry points use (the HTTP service and the queue
 * consumer). It starts (or finds) the database before TypeORM connects.
 */
export const PaymentsDatabase = TypeOrmModule.forRootAsync({
  imports: [DatabaseModule],
  inject: [Database],
  useFactory: typeOrmOptions,
});
