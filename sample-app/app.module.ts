import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency';
import { PaymentsModule } from './payments/payments.module.js';
import { PaymentsDatabase } from './typeorm.options.js';
import { WebhooksModule } from './webhooks/webhooks.module.js';

@Module({
  imports: [
    PaymentsDatabase,
    IdempotencyModule.forRoot({ ttl: '24h' }),
    PaymentsModule,
    WebhooksModule,
  ],
})
export class AppModule {}
