import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';
import type { VerifiedWebhook } from './webhook-options.interface.js';

/** @internal A verified delivery, with what its fingerprint compares. */
export interface RecordedDelivery {
  readonly verified: VerifiedWebhook;
  readonly compared: string;
}

/** The verified delivery of each request, set by the receiver's guard. */
const deliveries = new WeakMap<object, RecordedDelivery>();

/** @internal Records the verified delivery of `request`. */
export function recordDelivery(
  request: object,
  delivery: RecordedDelivery,
): void {
  deliveries.set(request, delivery);
}

/**
 * @internal The verified delivery of the request of `context`.
 * @throws IdempotencyConfigurationError when no receiver's guard verified
 * it: the route reads a delivery it has no decorator for, and fails closed.
 */
export function deliveryOf(context: ExecutionContext): RecordedDelivery {
  const delivery = deliveries.get(context.switchToHttp().getRequest<object>());
  if (!delivery) {
    throw new IdempotencyConfigurationError(
      `${context.getClass().name}.${context.getHandler().name} reads a webhook delivery that was not verified.`,
      'Decorate the route with @IdempotentWebhook(provider, { secret }).',
    );
  }
  return delivery;
}
