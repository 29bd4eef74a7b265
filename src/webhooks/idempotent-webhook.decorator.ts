import {
  applyDecorators,
  createParamDecorator,
  SetMetadata,
  UseGuards,
  type ExecutionContext,
} from '@nestjs/common';
import { createHash } from 'node:crypto';
import { Idempotent } from '../idempotent.decorator.js';
import { DEFAULT_SCOPE_NAME_METADATA } from '../idempotency.constants.js';
import { validScope, WHOLE_FINGERPRINTS } from '../core/attempt.js';
import { isThenable } from '../core/is-thenable.js';
import { toMilliseconds } from '../idempotency.duration.js';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type {
  IdempotentWebhookOptions,
  VerifiedWebhook,
  WebhookPresetName,
  WebhookProvider,
} from './webhook-options.interface.js';
import { WEBHOOK_PRESETS } from './webhook-presets.js';
import {
  IdempotentWebhookGuard,
  WEBHOOK_METADATA,
  type WebhookReceiver,
} from './webhook.guard.js';
import { deliveryOf } from './webhook-deliveries.js';

/** The provider a decorator names: a preset's, or the one given. */
function providerOf(
  preset: WebhookPresetName | WebhookProvider,
): WebhookProvider {
  const provider =
    typeof preset === 'string'
      ? (WEBHOOK_PRESETS as Record<string, WebhookProvider | undefined>)[preset]
      : preset;
  if (
    typeof provider?.verify !== 'function' ||
    typeof provider.identify !== 'function' ||
    typeof provider.name !== 'string'
  ) {
    throw new IdempotencyConfigurationError(
      `Invalid webhook provider: ${JSON.stringify(preset)}.`,
      `Name a preset (${Object.keys(WEBHOOK_PRESETS).join(', ')}) or give { name, verify, identify }.`,
    );
  }
  return provider;
}

/** Event ids as providers write them: visible ASCII, whatever the module's key rules. */
const EVENT_ID_RULES = {
  minLength: 1,
  maxLength: 255,
  pattern: /^[\x21-\x7e]+$/,
  validate: () => true,
};

/**
 * Makes a `@Post()` route a webhook receiver that processes each event once.
 *
 * A guard verifies every delivery's signature over the raw body (constant
 * time, any of the secrets), and its signed timestamp against `tolerance`,
 * before anything is claimed or handed to the handler: a delivery that
 * fails gets `401` problem+json and leaves nothing behind. A verified one
 * runs as `@Idempotent()` runs a request, keyed by the provider's event id
 * (no `Idempotency-Key` header) in one scope per receiver (and Stripe
 * Connect account): the first delivery runs the handler in the shared
 * transaction, a redelivery after it committed gets the stored 2xx, one
 * while it runs waits for it (`concurrency: 'wait'`, `waitTimeout`) and
 * then gets the stored answer or `409` (retried by the provider), and a
 * handler that failed stored nothing, so the next delivery runs it.
 *
 * The application must keep raw bodies:
 * `NestFactory.create(AppModule, { rawBody: true })`; without them every
 * delivery of a JSON or form body gets `500` and the application logs how
 * to fix it. A request with nothing to verify (no body, or a content type
 * no parser reads) gets `401`, like any unverified one.
 *
 * @param preset `'stripe'`, `'github'`, `'standard-webhooks'`, or a
 * {@link WebhookProvider} of your own
 * @param options the secret(s), and overrides of the route options
 *
 * @example
 * @Post('stripe')
 * @IdempotentWebhook('stripe', { secret: process.env.STRIPE_WEBHOOK_SECRET! })
 * onStripe(@WebhookDelivery() delivery: VerifiedWebhook<Stripe.Event>) {
 *   return this.payments.apply(delivery.event);
 * }
 */
export function IdempotentWebhook(
  preset: WebhookPresetName | WebhookProvider,
  options: IdempotentWebhookOptions,
): MethodDecorator & ClassDecorator {
  const provider = providerOf(preset);
  const receiver: WebhookReceiver = {
    provider,
    secret: options.secret,
    toleranceMs: toMilliseconds(options.tolerance ?? '5m', 'tolerance'),
    retryAfter: options.retryAfter,
  };
  const { scope } = options;
  return applyDecorators(
    SetMetadata(WEBHOOK_METADATA, receiver),
    // The default scope is named after the class and the method: the
    // explorer refuses two receivers of one name at bootstrap.
    ...(scope
      ? []
      : [
          SetMetadata(
            DEFAULT_SCOPE_NAME_METADATA,
            (type: { name: string }, method: string) =>
              `webhook:${provider.name}:${type.name}.${method}`,
          ),
        ]),
    UseGuards(IdempotentWebhookGuard),
    Idempotent({
      ttl: options.ttl,
      transactionTimeout: options.transactionTimeout,
      retryAfter: options.retryAfter,
      // A provider retries a delivery that failed: an error stored would
      // answer each of its retries, and the event would never be handled.
      // So not the module's default, which an API may have set for its
      // clients' requests.
      storeErrors: options.storeErrors ?? false,
      maxResponseSize: options.maxResponseSize,
      replayHeaders: options.replayHeaders,
      isolationLevel: options.isolationLevel,
      concurrency: options.concurrency ?? 'wait',
      waitTimeout: options.waitTimeout ?? provider.waitTimeout ?? '8s',
      required: true,
      key: (context) => deliveryOf(context).verified.id,
      keyValidation: EVENT_ID_RULES,
      scope: scope
        ? (context) => {
            const resolved = scope(context);
            return isThenable(resolved)
              ? resolved.then((value) =>
                  withAccount(context, validScope(value)),
                )
              : withAccount(context, validScope(resolved));
          }
        : (context) =>
            withAccount(
              context,
              `webhook:${deliveryOf(context).verified.provider}:${context.getClass().name}.${context.getHandler().name}${pathParameters(context)}`,
            ),
      fingerprint: eventFingerprint,
    }),
  );
}

/**
 * The fingerprint of a delivery: what the provider signed of the event,
 * whatever route received it (two routes of one scope share their events).
 */
function eventFingerprint(context: ExecutionContext): string {
  return `webhook:${createHash('sha256').update(deliveryOf(context).compared).digest('hex')}`;
}
WHOLE_FINGERPRINTS.add(eventFingerprint);

/** Beyond this many bytes, the path parameters' part of a scope is a hash. */
const MAX_PARAMETERS_BYTES = 256;

/**
 * The path parameters of the delivery's route, as a part of its default
 * scope: `:<name>=<value>` each, by name, URI-encoded (`''` without any).
 * A route per tenant (`tenants/:tenant/acme`) keeps each tenant's events
 * apart: a provider whose event ids are its accounts' own (sequential)
 * gives two tenants the same id, which one scope would take for one event
 * (the second tenant's refused, or answered with the first one's
 * response). A long part is its SHA-256, within the scope's bounds.
 */
function pathParameters(context: ExecutionContext): string {
  const params = context.switchToHttp().getRequest<{ params?: unknown }>()
    .params as Record<string, unknown> | undefined;
  if (!params || typeof params !== 'object') {
    return '';
  }
  const part = Object.keys(params)
    .sort()
    .map(
      (name) =>
        `:${encodeURIComponent(name)}=${encodeURIComponent(String(params[name]))}`,
    )
    .join('');
  return Buffer.byteLength(part) > MAX_PARAMETERS_BYTES
    ? `:params-sha256=${createHash('sha256').update(part).digest('hex')}`
    : part;
}

/**
 * `scope`, and `:<account>` for an event of a provider account (Stripe
 * Connect): the same event id in two accounts is two events, whatever the
 * receiver's scope.
 */
function withAccount(context: ExecutionContext, scope: string): string {
  const { account } = deliveryOf(context).verified;
  return account === undefined ? scope : `${scope}:${account}`;
}

/**
 * The verified delivery of an `@IdempotentWebhook()` route: its id, its
 * parsed event, its raw body, its timestamp and account.
 *
 * @example
 * onEvent(@WebhookDelivery() delivery: VerifiedWebhook<{ type: string }>) {
 *   if (delivery.event.type === 'payment_intent.succeeded') { ... }
 * }
 */
export const WebhookDelivery = createParamDecorator(
  (_data: unknown, context: ExecutionContext): VerifiedWebhook => {
    return deliveryOf(context).verified;
  },
);
