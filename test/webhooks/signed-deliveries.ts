import { createHmac, randomUUID } from 'node:crypto';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import type { WebhookPresetName } from '../../src/index.js';

/** A delivery as a provider sends it: its headers and its body's bytes. */
export interface SignedDelivery {
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** How a test delivery is made: each part may be forged or left out. */
export interface DeliveryParts {
  /** The event (or delivery) id. */
  readonly id: string;
  /** The payload, as sent. */
  readonly payload: Record<string, unknown>;
  /** The secret that signs it. */
  readonly secret: string;
  /** The signed timestamp (epoch seconds); now unless told. */
  readonly timestamp?: number;
  /** Signs this payload instead of the one sent. */
  readonly signedPayload?: Record<string, unknown>;
  /** The GitHub event name; `payment_intent.succeeded`-like types otherwise. */
  readonly githubEvent?: string;
}

/** Secrets in each provider's format. */
export const SECRETS: Record<WebhookPresetName, readonly [string, string]> = {
  // Stripe's secrets are used as their whole text.
  stripe: ['whsec_test_current_secret', 'whsec_test_previous_secret'],
  github: ['github-current-secret', 'github-previous-secret'],
  // Standard Webhooks: whsec_ and 24 to 64 bytes of base64.
  'standard-webhooks': [
    `whsec_${Buffer.from('standard-webhooks-current-secret').toString('base64')}`,
    `whsec_${Buffer.from('standard-webhooks-previous-secret').toString('base64')}`,
  ],
};

/** A secret of each provider's format that the receivers do not hold. */
export const FOREIGN_SECRETS: Record<WebhookPresetName, string> = {
  stripe: 'whsec_test_someone_elses_secret',
  github: 'someone-elses-secret',
  'standard-webhooks': `whsec_${Buffer.from('someone-elses-standard-secret').toString('base64')}`,
};

/**
 * A delivery signed by the provider's own reference code: Stripe's
 * `generateTestHeaderString`, Standard Webhooks' `Webhook.sign`, and for
 * GitHub (which ships no library) the HMAC recipe of its documentation.
 */
export function signedDelivery(
  preset: WebhookPresetName,
  parts: DeliveryParts,
): SignedDelivery {
  const timestamp = parts.timestamp ?? Math.floor(Date.now() / 1000);
  const body = JSON.stringify(parts.payload);
  const signed = JSON.stringify(parts.signedPayload ?? parts.payload);
  const json = { 'content-type': 'application/json' };
  switch (preset) {
    case 'stripe':
      return {
        headers: {
          ...json,
          'stripe-signature': Stripe.webhooks.generateTestHeaderString({
            payload: signed,
            secret: parts.secret,
            timestamp,
          }),
        },
        body,
      };
    case 'standard-webhooks':
      return {
        headers: {
          ...json,
          'webhook-id': parts.id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': new Webhook(parts.secret).sign(
            parts.id,
            new Date(timestamp * 1000),
            signed,
          ),
        },
        body,
      };
    case 'github':
      return {
        headers: {
          ...json,
          'x-github-delivery': parts.id,
          'x-github-event': parts.githubEvent ?? 'push',
          'x-hub-signature-256': `sha256=${createHmac('sha256', parts.secret).update(signed).digest('hex')}`,
        },
        body,
      };
  }
}

/** A new event id in the provider's format. */
export function eventId(preset: WebhookPresetName): string {
  const random = randomUUID().replaceAll('-', '');
  return preset === 'stripe'
    ? `evt_${random}`
    : preset === 'standard-webhooks'
      ? `msg_${random}`
      : randomUUID();
}

/** A payload of the provider's shape for event `id`. */
export function payloadOf(
  preset: WebhookPresetName,
  id: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return preset === 'stripe'
    ? {
        id,
        object: 'event',
        type: 'payment_intent.succeeded',
        pending_webhooks: 1,
        data: { object: { id: 'pi_1', amount: 1250 } },
        ...extra,
      }
    : preset === 'standard-webhooks'
      ? {
          type: 'invoice.paid',
          timestamp: new Date().toISOString(),
          data: { amount: 1250 },
          ...extra,
        }
      : { ref: 'refs/heads/main', after: 'abc123', ...extra };
}
