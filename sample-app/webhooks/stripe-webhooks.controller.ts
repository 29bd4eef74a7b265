import { Controller, HttpCode, Post } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import {
  IdempotentWebhook,
  WebhookDelivery,
  type VerifiedWebhook,
} from 'nestjs-idempotency';
import type { Repository } from 'typeorm';
import { PaymentConfirmation } from './payment-confirmation.entity.js';

/** The part of a Stripe event this receiver reads. */
interface StripeEvent {
  type: string;
  data: {
    object: {
      id: string;
      amount: number;
      currency: string;
      metadata?: { payment_id?: string };
    };
  };
}

@Controller('webhooks')
export class StripeWebhooksController {
  constructor(
    @InjectRepository(PaymentConfirmation)
    private readonly confirmations: Repository<PaymentConfirmation>,
  ) {}

  /**
   * Stripe's deliveries, verified against `STRIPE_WEBHOOK_SECRET` (several,
   * comma-separated, while a secret is rolled). Each event is processed
   * once: a redelivery gets the stored answer.
   */
  @Post('stripe')
  @HttpCode(200)
  @IdempotentWebhook('stripe', {
    secret: () => process.env.STRIPE_WEBHOOK_SECRET?.split(',') ?? [],
  })
  async stripe(
    @WebhookDelivery() delivery: VerifiedWebhook<StripeEvent>,
  ): Promise<{ received: string; confirmed?: string }> {
    const { type, data } = delivery.event;
    if (type !== 'payment_intent.succeeded') {
      return { received: delivery.id };
    }
    const intent = data.object;
    // In the delivery's transaction: committed with its record, or not at all.
    await this.confirmations.insert({
      paymentIntentId: intent.id,
      eventId: delivery.id,
      paymentId: intent.metadata?.payment_id ?? null,
      amount: intent.amount,
      currency: intent.currency.toUpperCase(),
    });
    return { received: delivery.id, confirmed: intent.id };
  }
}
