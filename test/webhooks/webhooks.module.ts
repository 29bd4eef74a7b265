import {
  Body,
  Controller,
  HttpCode,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import {
  hmacSha256Matches,
  IdempotentWebhook,
  WebhookDelivery,
  type VerifiedWebhook,
  type WebhookPresetName,
  type WebhookProvider,
} from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import type { Barrier } from '../utils/barrier.js';
import { SECRETS } from './signed-deliveries.js';

/** The secret of the custom provider's receiver. */
export const ACME_SECRET = 'acme-secret';

/**
 * A provider of one's own, as the README's: `X-Acme-Signature`, the hex
 * HMAC-SHA256 of `<X-Acme-Delivery>.<X-Acme-Timestamp>.<body>`; the key
 * `X-Acme-Delivery`.
 */
const acme: WebhookProvider = {
  name: 'acme',
  verify: (request, secrets) =>
    secrets.some((secret) =>
      hmacSha256Matches(
        secret,
        Buffer.concat([
          Buffer.from(
            `${request.header('x-acme-delivery')}.${request.header('x-acme-timestamp')}.`,
          ),
          request.rawBody,
        ]),
        request.header('x-acme-signature'),
        'hex',
      ),
    ),
  identify: (request, event) => ({
    id: request.header('x-acme-delivery'),
    timestamp: Number(request.header('x-acme-timestamp')),
    compared: (event as { type?: string } | undefined)?.type,
  }),
};

/** What the test makes the receivers do, by event id. */
@Injectable()
export class WebhookControls {
  /** Deliveries held after their write, until the barrier opens. */
  readonly holds = new Map<string, Barrier>();
  /** Events whose next delivery throws after its write. */
  readonly failing = new Set<string>();
  /** What the handlers saw of each delivery. */
  readonly seen: Array<{ rawBody: string; body: unknown }> = [];
}

/** What a receiver answers: what it got, so a replay can be compared. */
interface Receipt {
  provider: string;
  id: string;
  bytes: number;
  account: string | null;
}

@Controller('webhooks')
export class WebhooksController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly controls: WebhookControls,
  ) {}

  @Post('stripe')
  @HttpCode(200)
  @IdempotentWebhook('stripe', { secret: SECRETS.stripe })
  stripe(@WebhookDelivery() delivery: VerifiedWebhook, @Body() body: unknown) {
    return this.receive(delivery, body);
  }

  @Post('github')
  @HttpCode(200)
  @IdempotentWebhook('github', { secret: SECRETS.github })
  github(@WebhookDelivery() delivery: VerifiedWebhook, @Body() body: unknown) {
    return this.receive(delivery, body);
  }

  @Post('standard-webhooks')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', {
    // A function: read per delivery, as from a configuration service.
    secret: () => SECRETS['standard-webhooks'],
  })
  standard(
    @WebhookDelivery() delivery: VerifiedWebhook,
    @Body() body: unknown,
  ) {
    return this.receive(delivery, body);
  }

  /** Stripe, where a redelivery gives up waiting at once. */
  @Post('stripe-brief')
  @HttpCode(200)
  @IdempotentWebhook('stripe', {
    secret: SECRETS.stripe,
    waitTimeout: '200ms',
  })
  stripeBrief(@WebhookDelivery() delivery: VerifiedWebhook) {
    return this.receive(delivery, undefined);
  }

  /** Stripe, in a scope of the application's own. */
  @Post('stripe-scoped')
  @HttpCode(200)
  @IdempotentWebhook('stripe', {
    secret: SECRETS.stripe,
    scope: () => 'payments',
  })
  stripeScoped(@WebhookDelivery() delivery: VerifiedWebhook) {
    return this.receive(delivery, undefined);
  }

  @Post('acme')
  @HttpCode(200)
  @IdempotentWebhook(acme, { secret: [ACME_SECRET], tolerance: 60_000 })
  acme(@WebhookDelivery() delivery: VerifiedWebhook) {
    return this.receive(delivery, undefined);
  }

  private async receive(
    delivery: VerifiedWebhook,
    body: unknown,
  ): Promise<Receipt> {
    await this.orders.insert({
      reference: delivery.id,
      source: `${delivery.provider}${delivery.account ? `:${delivery.account}` : ''}`,
    });
    this.controls.seen.push({
      rawBody: delivery.rawBody.toString('utf8'),
      body,
    });
    await this.controls.holds.get(delivery.id)?.wait();
    if (this.controls.failing.delete(delivery.id)) {
      throw new Error(`The handler of ${delivery.id} failed`);
    }
    return {
      provider: delivery.provider,
      id: delivery.id,
      bytes: delivery.rawBody.length,
      account: delivery.account ?? null,
    };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [WebhooksController],
  providers: [WebhookControls],
})
export class WebhooksTestModule {}

/**
 * A second receiver class named as the first, in a module of its own (as
 * two feature modules each have their `WebhooksController`), with the same
 * method: its default scope would be the first's.
 */
export function sameNamedReceiver(scope?: string) {
  @Controller('ledger/webhooks')
  class WebhooksController {
    @Post('stripe')
    @HttpCode(200)
    @IdempotentWebhook('stripe', {
      secret: SECRETS.stripe,
      ...(scope ? { scope: () => scope } : {}),
    })
    stripe(@WebhookDelivery() delivery: VerifiedWebhook) {
      return { id: delivery.id, ledger: true };
    }
  }
  @Module({ controllers: [WebhooksController] })
  class LedgerWebhooksModule {}
  return LedgerWebhooksModule;
}

/** The receiver route of each preset. */
export const ROUTES: Record<WebhookPresetName, string> = {
  stripe: '/webhooks/stripe',
  github: '/webhooks/github',
  'standard-webhooks': '/webhooks/standard-webhooks',
};
