import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { PaymentsModule } from './payments/payments.module.js';
import { PaymentsDatabase } from './typeorm.options.js';

@Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
  ],
})
export class AppModule {}
