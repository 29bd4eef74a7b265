import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { PaymentsModule } from '../payments/payments.module.js';
import { PaymentsDatabase } from '../typeorm.options.js';
import { PaymentsConsumer } from './payments.consumer.js';

@Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
  ],
  controllers: [PaymentsConsumer],
})
export class ConsumerModule {}
