import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { PaymentConfirmation } from './payment-confirmation.entity.js';
import { StripeWebhooksController } from './stripe-webhooks.controller.js';

/** The providers' webhooks: Stripe's payment confirmations. */
@Module({
  imports: [TypeOrmModule.forFeature([PaymentConfirmation])],
  controllers: [StripeWebhooksController],
})
export class WebhooksModule {}
