/**
 * A Standard Webhooks secret is `whsec_` and the base64 of its key. One that
 * decodes to no key (`whsec_` alone, left by an empty environment variable)
 * or is not base64 at all would, decoded leniently, be a key of no bytes:
 * a signature anyone can make. Such a secret is left out, as an empty one
 * is: a receiver left with none answers 500 webhook-misconfigured, and one
 * with a usable secret beside it verifies with that one alone. So is a
 * Stripe secret of `whsec_` alone, a key anyone knows.
 *
 * A secret function that returns no secret for a delivery (a tenant it
 * does not know) refuses it as unverified (401), not as a misconfiguration.
 * Such a route per tenant keeps each tenant's events apart (its path
 * parameters are in the default scope): one event id of two tenants runs
 * for each.
 * A secret function that throws (its vault out of reach) gets the
 * delivery a 503 with `Retry-After`, nothing run or stored, and the
 * provider's next delivery runs. A provider of one's own whose `verify()`
 * throws (on a header it did not expect) refuses the delivery as
 * unverified (401), one whose `identify()` throws as malformed (400):
 * problem+json, never a bare 500.
 */
import {
  Controller,
  HttpCode,
  Post,
  type ExecutionContext,
} from '@nestjs/common';
import { createHmac, randomUUID } from 'node:crypto';
import Stripe from 'stripe';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  IdempotentWebhook,
  WebhookDelivery,
  type VerifiedWebhook,
  type WebhookProvider,
} from '../../src/index.js';
import { answer } from '../utils/problems.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';
import { SECRETS } from './signed-deliveries.js';

/** A usable Standard Webhooks secret. */
const USABLE = SECRETS['standard-webhooks'][0];
/** The deliveries the receivers ran, by event id. */
const ran: string[] = [];
/** Whether the vault of the `vault` receiver's secret is out of reach. */
const vault = { down: false };

/**
 * Standard Webhooks, whose checks throw when the delivery says so
 * (`webhook-id` starting with `throw-verify` or `throw-identify`).
 */
const fragile: WebhookProvider = {
  name: 'fragile',
  verify(request) {
    if (request.header('webhook-id')?.startsWith('throw-verify')) {
      throw new TypeError('cannot read the signature');
    }
    return true;
  },
  identify(request) {
    const id = request.header('webhook-id');
    if (id?.startsWith('throw-identify')) {
      throw new TypeError('cannot read the event');
    }
    return { id };
  },
};

@Controller('secrets')
class SecretsController {
  @Post('prefix-only')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', { secret: 'whsec_' })
  prefixOnly(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('not-base64')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', { secret: 'whsec_***' })
  notBase64(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('stripe-prefix-only')
  @HttpCode(200)
  @IdempotentWebhook('stripe', { secret: 'whsec_' })
  stripePrefixOnly(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('newline')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', {
    // As read from a file: a newline after it, and no padding.
    secret: `${USABLE.replace(/=+$/, '')}\n`,
  })
  newline(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('vault')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', {
    retryAfter: 7,
    secret: () => {
      if (vault.down) {
        throw new Error('the vault is out of reach');
      }
      return USABLE;
    },
  })
  fromVault(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('tenants/:tenant')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', {
    // A secret per tenant; none for a tenant the application does not know.
    secret: (context: ExecutionContext) => {
      const { tenant } = context
        .switchToHttp()
        .getRequest<{ params: Record<string, string> }>().params;
      return tenant === 'known' || tenant === 'other' ? [USABLE] : [];
    },
  })
  perTenant(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('fragile')
  @HttpCode(200)
  @IdempotentWebhook(fragile, { secret: 'fragile' })
  fragile(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }

  @Post('rotating')
  @HttpCode(200)
  @IdempotentWebhook('standard-webhooks', { secret: ['whsec_', USABLE] })
  rotating(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(delivery.id);
    return { ran: true };
  }
}

/** The base64 HMAC-SHA256 of a Standard Webhooks delivery under `key`. */
function signature(key: Buffer, id: string, timestamp: string, body: string) {
  return createHmac('sha256', key)
    .update(`${id}.${timestamp}.${body}`)
    .digest('base64');
}

describe.each(PLATFORMS)(
  'webhook secrets no key can come of (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        controllers: [SecretsController],
        platform,
        rawBody: true,
      });
    });
    afterAll(() => target.close());

    /** Delivers event `id` to `route`, signed under `key`. */
    const deliver = (route: string, id: string, key: Buffer) => {
      const body = JSON.stringify({ type: 'invoice.paid', data: {} });
      const timestamp = String(Math.floor(Date.now() / 1000));
      return answer(
        fetch(`${target.url}/secrets/${route}`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': timestamp,
            'webhook-signature': `v1,${signature(key, id, timestamp, body)}`,
          },
          body,
        }),
      );
    };
    const stored = (id: string) =>
      target.db.query(
        `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key LIKE '%' || $1`,
        [id],
      );

    it.each(['prefix-only', 'not-base64'])(
      'answers 500 webhook-misconfigured to a delivery forged with an empty key (/secrets/%s): nothing runs, nothing is stored',
      async (route) => {
        const id = `msg_${randomUUID()}`;
        expect(await deliver(route, id, Buffer.alloc(0))).toMatchObject({
          status: 500,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          body: { type: 'urn:idempotency:webhook-misconfigured', status: 500 },
        });
        expect(ran).not.toContain(id);
        expect(await stored(id)).toEqual([]);
      },
    );

    it('answers 500 webhook-misconfigured to a Stripe delivery signed with "whsec_", the key of a receiver whose secret is only that', async () => {
      const id = `evt_${randomUUID()}`;
      const body = JSON.stringify({ id, type: 'invoice.paid', data: {} });
      const forged = await answer(
        fetch(`${target.url}/secrets/stripe-prefix-only`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'stripe-signature': Stripe.webhooks.generateTestHeaderString({
              payload: body,
              secret: 'whsec_',
            }),
          },
          body,
        }),
      );
      expect(forged).toMatchObject({
        status: 500,
        body: { type: 'urn:idempotency:webhook-misconfigured' },
      });
      expect(ran).not.toContain(id);
      expect(await stored(id)).toEqual([]);
    });

    it('refuses a delivery to a tenant its secret function has no secret for as unverified (401), not as a misconfiguration (500): nothing runs or is stored', async () => {
      const key = Buffer.from(USABLE.slice('whsec_'.length), 'base64');
      const unknown = `msg_${randomUUID()}`;
      for (const forged of [Buffer.alloc(0), key]) {
        expect(await deliver('tenants/unknown', unknown, forged)).toMatchObject(
          {
            status: 401,
            contentType: expect.stringMatching(/^application\/problem\+json/),
            body: { type: 'urn:idempotency:webhook-unverified', status: 401 },
          },
        );
      }
      expect(ran).not.toContain(unknown);
      expect(await stored(unknown)).toEqual([]);
      const known = `msg_${randomUUID()}`;
      expect(await deliver('tenants/known', known, key)).toMatchObject({
        status: 200,
        body: { ran: true },
      });
      expect(ran).toContain(known);
    });

    it('keeps the events of two tenants apart on a route per tenant: one event id, one body, each runs once in a scope of its own', async () => {
      const key = Buffer.from(USABLE.slice('whsec_'.length), 'base64');
      // A provider whose ids are each account's own gives two tenants one id.
      const id = `msg_${randomUUID()}`;
      for (const tenant of ['known', 'other', 'known', 'other']) {
        expect(await deliver(`tenants/${tenant}`, id, key)).toMatchObject({
          status: 200,
          body: { ran: true },
        });
      }
      expect(ran.filter((each) => each === id)).toEqual([id, id]);
      expect(
        await target.db.query(
          `SELECT scope FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1 ORDER BY scope`,
          [id],
        ),
      ).toEqual([
        {
          scope:
            'webhook:standard-webhooks:SecretsController.perTenant:tenant=known',
        },
        {
          scope:
            'webhook:standard-webhooks:SecretsController.perTenant:tenant=other',
        },
      ]);
    });

    it('takes a secret with a newline after it and no padding, as read from a file', async () => {
      const id = `msg_${randomUUID()}`;
      const key = Buffer.from(USABLE.slice('whsec_'.length), 'base64');
      expect(await deliver('newline', id, key)).toMatchObject({ status: 200 });
      expect(ran).toContain(id);
    });

    it('verifies with the usable secret alone when an unusable one stands beside it', async () => {
      const forged = `msg_${randomUUID()}`;
      expect(await deliver('rotating', forged, Buffer.alloc(0))).toMatchObject({
        status: 401,
        body: { type: 'urn:idempotency:webhook-unverified' },
      });
      expect(ran).not.toContain(forged);
      const signed = `msg_${randomUUID()}`;
      const key = Buffer.from(USABLE.slice('whsec_'.length), 'base64');
      expect(await deliver('rotating', signed, key)).toMatchObject({
        status: 200,
      });
      expect(ran).toContain(signed);
    });

    it('answers 503 with Retry-After when the secret function throws: nothing runs or is stored, and the next delivery runs', async () => {
      const id = `msg_${randomUUID()}`;
      const key = Buffer.from(USABLE.slice('whsec_'.length), 'base64');
      vault.down = true;
      try {
        expect(await deliver('vault', id, key)).toEqual({
          status: 503,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          retryAfter: '7',
          replayed: false,
          body: {
            type: 'urn:idempotency:unavailable',
            title: 'Request not completed',
            status: 503,
            detail:
              'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
          },
        });
      } finally {
        vault.down = false;
      }
      expect(ran).not.toContain(id);
      expect(await stored(id)).toEqual([]);
      expect(await deliver('vault', id, key)).toMatchObject({
        status: 200,
        body: { ran: true },
      });
      expect(ran.filter((each) => each === id)).toEqual([id]);
    });

    it.each([
      ['verify', 401, 'webhook-unverified'],
      ['identify', 400, 'webhook-malformed'],
    ] as const)(
      'refuses a delivery whose provider’s %s() throws with a %i problem (%s): nothing runs or is stored',
      async (check, status, slug) => {
        const id = `throw-${check}-${randomUUID()}`;
        expect(await deliver('fragile', id, Buffer.alloc(0))).toMatchObject({
          status,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          body: { type: `urn:idempotency:${slug}`, status },
        });
        expect(ran).not.toContain(id);
        expect(await stored(id)).toEqual([]);
      },
    );
  },
);
