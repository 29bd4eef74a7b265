import Stripe from 'stripe';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

const SECRET = 'whsec_sample_current';
const ROLLED = 'whsec_sample_previous';

describe('the sample app receiving Stripe webhooks, run as `node dist-sample/main.js`', () => {
  let db: TestDatabase;
  let app: SampleProcess;

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSample({
      DATABASE_URL: db.url,
      STRIPE_WEBHOOK_SECRET: `${SECRET},${ROLLED}`,
    });
  });

  afterAll(async () => {
    await app?.stop();
    await db?.drop();
  });

  /** A `payment_intent.succeeded` event as Stripe delivers it, signed by Stripe's own code. */
  const deliver = (
    eventId: string,
    intentId: string,
    { secret = SECRET, pendingWebhooks = 1 } = {},
  ) => {
    const payload = JSON.stringify({
      id: eventId,
      object: 'event',
      type: 'payment_intent.succeeded',
      pending_webhooks: pendingWebhooks,
      data: {
        object: {
          id: intentId,
          object: 'payment_intent',
          amount: 1250,
          currency: 'eur',
        },
      },
    });
    return fetch(`${app.url}/webhooks/stripe`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        'Stripe-Signature': Stripe.webhooks.generateTestHeaderString({
          payload,
          secret,
        }),
      },
      body: payload,
    });
  };
  const confirmations = () =>
    db.query<{ payment_intent_id: string; event_id: string }>(
      'SELECT payment_intent_id, event_id FROM payment_confirmations ORDER BY payment_intent_id',
    );

  it('confirms a payment intent once, and answers its redeliveries with the stored 200', async () => {
    const first = await deliver('evt_sample_1', 'pi_sample_1');
    const body = await first.text();
    expect(first.status).toBe(200);
    expect(JSON.parse(body)).toEqual({
      received: 'evt_sample_1',
      confirmed: 'pi_sample_1',
    });

    // Stripe counts the endpoints still to be told: the redelivery differs there.
    const redelivery = await deliver('evt_sample_1', 'pi_sample_1', {
      pendingWebhooks: 0,
    });
    expect(redelivery.status).toBe(200);
    expect(redelivery.headers.get('idempotent-replayed')).toBe('true');
    expect(await redelivery.text()).toBe(body);

    expect(await confirmations()).toEqual([
      { payment_intent_id: 'pi_sample_1', event_id: 'evt_sample_1' },
    ]);
  });

  it('refuses a delivery signed with another secret (401), and accepts the rolled one', async () => {
    const forged = await deliver('evt_sample_2', 'pi_sample_2', {
      secret: 'whsec_not_ours',
    });
    expect(forged.status).toBe(401);
    expect(forged.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(
      (await deliver('evt_sample_2', 'pi_sample_2', { secret: ROLLED })).status,
    ).toBe(200);
    expect(await confirmations()).toEqual([
      { payment_intent_id: 'pi_sample_1', event_id: 'evt_sample_1' },
      { payment_intent_id: 'pi_sample_2', event_id: 'evt_sample_2' },
    ]);
  });
});
