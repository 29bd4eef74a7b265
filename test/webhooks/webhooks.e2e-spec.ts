import { createHmac } from 'node:crypto';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  IdempotencyConfigurationError,
  type WebhookPresetName,
} from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';
import { answer } from '../utils/problems.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';
import {
  eventId,
  FOREIGN_SECRETS,
  payloadOf,
  SECRETS,
  signedDelivery,
  type DeliveryParts,
  type SignedDelivery,
} from './signed-deliveries.js';
import {
  ACME_SECRET,
  ROUTES,
  sameNamedReceiver,
  WebhookControls,
  WebhooksTestModule,
} from './webhooks.module.js';

/** Event `id` of `preset`, signed with the receiver's current secret. */
const sent = (
  preset: WebhookPresetName,
  id: string,
  extra?: Record<string, unknown>,
) =>
  signedDelivery(preset, {
    id,
    payload: payloadOf(preset, id, extra),
    secret: SECRETS[preset][0],
  });

const PRESETS: readonly WebhookPresetName[] = [
  'stripe',
  'github',
  'standard-webhooks',
];

/** The refusals' bodies, by problem. */
const UNVERIFIED = {
  type: 'urn:idempotency:webhook-unverified',
  title: 'Webhook signature not verified',
  status: 401,
  detail:
    'The delivery carries no signature made with a secret of this receiver over its body.',
};
const EXPIRED = {
  type: 'urn:idempotency:webhook-expired',
  title: 'Webhook timestamp outside the tolerance',
  status: 401,
  detail:
    'The delivery was signed too long ago (or ahead of time): it is refused as a replay.',
};

/**
 * Requests with nothing a receiver could verify: no body, or one of a
 * content type no parser reads (so no raw body is kept), unsigned.
 */
const NOTHING_TO_VERIFY = [
  ['text/plain', 'not an event'],
  ['none', undefined],
  ['application/json', ''],
] as const;

/**
 * How such a request is refused: 401 unverified, but for an empty JSON
 * body, which Fastify refuses itself (400) before any guard.
 */
const refusalOf = (platform: string, contentType: string) =>
  platform === 'fastify' && contentType === 'application/json'
    ? { status: 400 }
    : { status: 401, body: { type: 'urn:idempotency:webhook-unverified' } };

/** Sends `body` as `contentType` to `url`, unsigned. */
const unsigned = (url: string, contentType: string, body?: string) =>
  answer(
    fetch(url, {
      method: 'POST',
      headers: contentType === 'none' ? {} : { 'content-type': contentType },
      body,
    }),
  );

describe.each(PLATFORMS)('webhook receivers (%s)', (platform) => {
  let target: TestApp;
  let controls: WebhookControls;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [WebhooksTestModule],
      platform,
      rawBody: true,
    });
    controls = target.app.get(WebhookControls);
  });
  afterAll(() => target.close());

  const deliver = (path: string, delivery: SignedDelivery) =>
    fetch(`${target.url}${path}`, {
      method: 'POST',
      headers: delivery.headers,
      body: delivery.body,
    });
  const rows = async (reference: string) =>
    (
      await target.db.query<{ source: string }>(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      )
    ).map((row) => row.source);
  const records = async (key: string) =>
    (
      await target.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      )
    )[0].n;

  describe.each(PRESETS)('%s', (preset) => {
    const route = ROUTES[preset];
    const [secret, previousSecret] = SECRETS[preset];
    const delivery = (id: string, parts: Partial<DeliveryParts> = {}) =>
      signedDelivery(preset, {
        id,
        payload: payloadOf(preset, id),
        secret,
        ...parts,
      });
    const receipt = (id: string, body: string) => ({
      provider: preset,
      id,
      bytes: Buffer.byteLength(body),
      account: null,
    });

    it('runs a valid delivery once, with its raw body and its parsed event', async () => {
      const id = eventId(preset);
      const valid = delivery(id);
      const first = await answer(deliver(route, valid));
      expect(first).toMatchObject({
        status: 200,
        replayed: false,
        body: receipt(id, valid.body),
      });
      expect(await rows(id)).toEqual([preset]);
      expect(controls.seen.at(-1)).toEqual({
        rawBody: valid.body,
        body: JSON.parse(valid.body),
      });
    });

    it('answers the same delivery sent 10 times in turn with the stored 2xx, one set of rows', async () => {
      const id = eventId(preset);
      const valid = delivery(id);
      const answers = [];
      for (let i = 0; i < 10; i += 1) {
        answers.push(await answer(deliver(route, valid)));
      }
      expect(answers.map((a) => [a.status, a.replayed])).toEqual([
        [200, false],
        ...Array.from({ length: 9 }, () => [200, true]),
      ]);
      expect(new Set(answers.map((a) => JSON.stringify(a.body)))).toEqual(
        new Set([JSON.stringify(receipt(id, valid.body))]),
      );
      expect(await rows(id)).toEqual([preset]);
    });

    it('answers 10 deliveries of one event sent at once with 2xx, one set of rows', async () => {
      const id = eventId(preset);
      const valid = delivery(id);
      const answers = await Promise.all(
        Array.from({ length: 10 }, () => answer(deliver(route, valid))),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
      expect(answers.filter((a) => !a.replayed)).toHaveLength(1);
      for (const a of answers) {
        expect(a.body).toEqual(receipt(id, valid.body));
      }
      expect(await rows(id)).toEqual([preset]);
    });

    it('accepts a delivery signed with the previous secret (rotation)', async () => {
      const id = eventId(preset);
      const old = delivery(id, { secret: previousSecret });
      expect((await answer(deliver(route, old))).status).toBe(200);
      expect(await rows(id)).toEqual([preset]);
    });

    const forgeries: Array<
      [string, (id: string) => SignedDelivery, object | undefined]
    > = [
      [
        'a signature made with another secret',
        (id) => delivery(id, { secret: FOREIGN_SECRETS[preset] }),
        UNVERIFIED,
      ],
      [
        'a signature over another body',
        (id) =>
          delivery(id, {
            signedPayload: payloadOf(preset, id, { amount: 1 }),
          }),
        UNVERIFIED,
      ],
      [
        'no signature header',
        (id) => {
          const valid = delivery(id);
          const headers = Object.fromEntries(
            Object.entries(valid.headers).filter(
              ([name]) =>
                !/^(stripe-signature|x-hub-signature-256|webhook-signature)$/.test(
                  name,
                ),
            ),
          );
          return { headers, body: valid.body };
        },
        UNVERIFIED,
      ],
    ];
    if (preset !== 'github') {
      forgeries.push([
        'a timestamp older than the tolerance (5 minutes)',
        (id) =>
          delivery(id, { timestamp: Math.floor(Date.now() / 1000) - 301 }),
        EXPIRED,
      ]);
    }

    it.each(forgeries)(
      'refuses %s with 401 problem+json, stores nothing, and runs the valid delivery that follows',
      async (_name, forge, problem) => {
        const id = eventId(preset);
        const refused = await answer(deliver(route, forge(id)));
        expect(refused).toEqual({
          status: 401,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          retryAfter: null,
          replayed: false,
          body: problem,
        });
        expect(await records(id)).toBe(0);
        expect(await rows(id)).toEqual([]);

        const valid = await answer(deliver(route, delivery(id)));
        expect(valid).toMatchObject({ status: 200, replayed: false });
        expect(await rows(id)).toEqual([preset]);
      },
    );

    it('runs the real delivery after a forged one with its event id', async () => {
      const id = eventId(preset);
      const forged = delivery(id, {
        secret: FOREIGN_SECRETS[preset],
        payload: payloadOf(preset, id, { forged: true }),
      });
      expect((await deliver(route, forged)).status).toBe(401);
      const real = await answer(deliver(route, delivery(id)));
      expect(real).toMatchObject({ status: 200, replayed: false });
      expect(await rows(id)).toEqual([preset]);
      expect(await records(id)).toBe(1);
    });

    it('runs the next delivery after the handler threw, with its writes rolled back', async () => {
      const id = eventId(preset);
      const valid = delivery(id);
      controls.failing.add(id);
      expect((await deliver(route, valid)).status).toBe(500);
      expect(await rows(id)).toEqual([]);
      expect(await records(id)).toBe(0);

      const retried = await answer(deliver(route, valid));
      expect(retried).toMatchObject({ status: 200, replayed: false });
      expect(await rows(id)).toEqual([preset]);
    });
  });

  describe('what a redelivery compares', () => {
    it('Stripe: a redelivery whose pending_webhooks changed is the same event (2xx replayed); another type with the same id is 422', async () => {
      const id = eventId('stripe');
      const first = sent('stripe', id, { pending_webhooks: 2 });
      expect((await deliver(ROUTES.stripe, first)).status).toBe(200);
      const redelivery = sent('stripe', id, { pending_webhooks: 1 });
      expect(await answer(deliver(ROUTES.stripe, redelivery))).toMatchObject({
        status: 200,
        replayed: true,
      });
      const other = sent('stripe', id, { type: 'charge.refunded' });
      expect((await deliver(ROUTES.stripe, other)).status).toBe(422);
      expect(await rows(id)).toEqual(['stripe']);
    });

    it('GitHub: a redelivery compares X-GitHub-Event only', async () => {
      const id = eventId('github');
      expect((await deliver(ROUTES.github, sent('github', id))).status).toBe(
        200,
      );
      const redelivery = sent('github', id, { after: 'def456' });
      expect(await answer(deliver(ROUTES.github, redelivery))).toMatchObject({
        status: 200,
        replayed: true,
      });
      const other = signedDelivery('github', {
        id,
        payload: payloadOf('github', id),
        secret: SECRETS.github[0],
        githubEvent: 'issues',
      });
      expect((await deliver(ROUTES.github, other)).status).toBe(422);
      expect(await rows(id)).toEqual(['github']);
    });
  });

  it('Standard Webhooks: runs a delivery as Svix sends it by default, its headers named svix-id, svix-timestamp and svix-signature, once, and replays its redelivery', async () => {
    /** The same delivery, under Svix's own names (`svix-` for `webhook-`). */
    const svix = ({ headers, body }: SignedDelivery): SignedDelivery => ({
      headers: Object.fromEntries(
        Object.entries(headers).map(([name, value]) => [
          name.replace(/^webhook-/, 'svix-'),
          value,
        ]),
      ),
      body,
    });
    const id = eventId('standard-webhooks');
    const first = svix(sent('standard-webhooks', id));
    expect(Object.keys(first.headers).sort()).toEqual([
      'content-type',
      'svix-id',
      'svix-signature',
      'svix-timestamp',
    ]);
    // Before the fix: 401 webhook-unverified, for every delivery of Svix.
    expect((await deliver(ROUTES['standard-webhooks'], first)).status).toBe(
      200,
    );
    // A redelivery under either names is the same event.
    for (const redelivery of [
      svix(sent('standard-webhooks', id)),
      sent('standard-webhooks', id),
    ]) {
      expect(
        await answer(deliver(ROUTES['standard-webhooks'], redelivery)),
      ).toMatchObject({ status: 200, replayed: true });
    }
    expect(await rows(id)).toEqual(['standard-webhooks']);
    // Signed with another secret under Svix's names: still unverified.
    const forged = svix(
      signedDelivery('standard-webhooks', {
        id: eventId('standard-webhooks'),
        payload: payloadOf('standard-webhooks', id),
        secret: FOREIGN_SECRETS['standard-webhooks'],
      }),
    );
    expect(
      await answer(deliver(ROUTES['standard-webhooks'], forged)),
    ).toMatchObject({ status: 401, body: UNVERIFIED });
  });

  it('Stripe Connect: one event id in two accounts is two events', async () => {
    const id = eventId('stripe');
    for (const account of ['acct_one', 'acct_two', 'acct_one']) {
      const connect = sent('stripe', id, { account });
      expect((await deliver(ROUTES.stripe, connect)).status).toBe(200);
    }
    expect(await rows(id)).toEqual(['stripe:acct_one', 'stripe:acct_two']);
  });

  it("Stripe Connect with a scope of the application's own: one event id in two accounts is still two events", async () => {
    const id = eventId('stripe');
    for (const account of ['acct_one', 'acct_two', 'acct_one']) {
      const connect = sent('stripe', id, { account });
      expect((await deliver('/webhooks/stripe-scoped', connect)).status).toBe(
        200,
      );
    }
    expect(await rows(id)).toEqual(['stripe:acct_one', 'stripe:acct_two']);
    expect(
      await target.db.query(
        `SELECT scope FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1 ORDER BY scope`,
        [id],
      ),
    ).toEqual([{ scope: 'payments:acct_one' }, { scope: 'payments:acct_two' }]);
  });

  it.each(NOTHING_TO_VERIFY)(
    'answers an unsigned request of content type %s, with nothing to verify, 401 problem+json',
    async (contentType, body) => {
      expect(
        await unsigned(`${target.url}${ROUTES.stripe}`, contentType, body),
      ).toMatchObject(refusalOf(platform, contentType));
    },
  );

  it('GitHub: a verified delivery without X-GitHub-Delivery gets 400, nothing stored', async () => {
    const id = eventId('github');
    const valid = sent('github', id);
    const headers = { ...valid.headers };
    delete headers['x-github-delivery'];
    const refused = await answer(
      deliver(ROUTES.github, { headers, body: valid.body }),
    );
    expect(refused).toMatchObject({
      status: 400,
      contentType: expect.stringMatching(/^application\/problem\+json/),
      body: {
        type: 'urn:idempotency:webhook-malformed',
        status: 400,
        title: 'Webhook event id missing',
      },
    });
    expect(await rows(id)).toEqual([]);
  });

  describe('a provider of its own', () => {
    const acme = (
      id: string,
      timestamp: string | undefined,
      type = 'ping',
      signedId = id,
    ) => {
      const body = JSON.stringify({ type });
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        'x-acme-delivery': id,
        'x-acme-signature': createHmac('sha256', ACME_SECRET)
          .update(`${signedId}.${timestamp}.${body}`)
          .digest('hex'),
      };
      if (timestamp !== undefined) {
        headers['x-acme-timestamp'] = timestamp;
      }
      return deliver('/webhooks/acme', { headers, body });
    };
    const now = () => String(Math.floor(Date.now() / 1000));

    it('runs a verified delivery once, replays it, and compares what identify() names', async () => {
      const id = eventId('github');
      expect(await answer(acme(id, now()))).toMatchObject({
        status: 200,
        replayed: false,
        body: { provider: 'acme', id },
      });
      expect(await answer(acme(id, now()))).toMatchObject({
        status: 200,
        replayed: true,
      });
      expect((await acme(id, now(), 'other')).status).toBe(422);
      expect(await rows(id)).toEqual(['acme']);
    });

    it('refuses a captured delivery sent again under another id (the README signs the id), running nothing', async () => {
      const id = eventId('github');
      const other = eventId('github');
      expect(await answer(acme(id, now()))).toMatchObject({ status: 200 });
      const resent = await answer(acme(other, now(), 'ping', id));
      expect(resent).toMatchObject({
        status: 401,
        contentType: expect.stringMatching(/^application\/problem\+json/),
      });
      expect(await records(other)).toBe(0);
      expect(await rows(id)).toEqual(['acme']);
      expect(await rows(other)).toEqual([]);
    });

    it('refuses a timestamp outside its tolerance (1 minute), or none (NaN), as a replay', async () => {
      const id = eventId('github');
      const old = String(Math.floor(Date.now() / 1000) - 61);
      for (const timestamp of [old, undefined, 'soon']) {
        expect(await answer(acme(id, timestamp))).toMatchObject({
          status: 401,
          body: EXPIRED,
        });
      }
      expect(await records(id)).toBe(0);
      expect(await rows(id)).toEqual([]);
    });
  });

  it('answers a redelivery while the first still runs with 409 and Retry-After once its wait ends; the first then commits', async () => {
    const id = eventId('stripe');
    const valid = sent('stripe', id);
    const hold = new Barrier();
    controls.holds.set(id, hold);
    const first = answer(deliver('/webhooks/stripe-brief', valid));
    await hold.reached();
    const duplicate = await answer(deliver('/webhooks/stripe-brief', valid));
    expect(duplicate).toMatchObject({
      status: 409,
      retryAfter: '1',
      body: { type: 'urn:idempotency:request-in-progress', key: id },
    });
    hold.open();
    expect(await first).toMatchObject({ status: 200, replayed: false });
    expect(
      await answer(deliver('/webhooks/stripe-brief', valid)),
    ).toMatchObject({ status: 200, replayed: true });
    expect(await rows(id)).toEqual(['stripe']);
  });
});

describe('two receivers whose classes and methods have the same names', () => {
  it('refuse to start with their default scopes, which would be one: the second would replay the first', async () => {
    let started: TestApp | undefined;
    let error: unknown;
    try {
      started = await startTestApp({
        imports: [WebhooksTestModule, sameNamedReceiver()],
        rawBody: true,
      });
    } catch (caught) {
      error = caught;
    }
    await started?.close();
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toContain(
      'WebhooksController.stripe (/webhooks/stripe) and WebhooksController.stripe (/ledger/webhooks/stripe) would keep their records in the same default scope, webhook:stripe:WebhooksController.stripe',
    );
  });

  it('each run the same event with a scope of its own', async () => {
    const target = await startTestApp({
      imports: [WebhooksTestModule, sameNamedReceiver('ledger')],
      rawBody: true,
    });
    try {
      const delivery = sent('stripe', eventId('stripe'));
      const send = (path: string) =>
        fetch(`${target.url}${path}`, {
          method: 'POST',
          headers: delivery.headers,
          body: delivery.body,
        });
      const billing = await send(ROUTES.stripe);
      const ledger = await send('/ledger/webhooks/stripe');
      expect([billing.status, ledger.status]).toEqual([200, 200]);
      expect(ledger.headers.get('idempotent-replayed')).toBeNull();
      expect(await ledger.json()).toMatchObject({ ledger: true });
    } finally {
      await target.close();
    }
  });
});

describe.each(PLATFORMS)(
  'a webhook receiver without raw bodies (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({ imports: [WebhooksTestModule], platform });
    });
    afterAll(() => target.close());

    it('answers 500 problem+json and runs nothing (the application logs how to keep raw bodies)', async () => {
      const id = eventId('stripe');
      const valid = sent('stripe', id);
      const refused = await answer(
        fetch(`${target.url}${ROUTES.stripe}`, {
          method: 'POST',
          headers: valid.headers,
          body: valid.body,
        }),
      );
      expect(refused).toMatchObject({
        status: 500,
        contentType: expect.stringMatching(/^application\/problem\+json/),
        body: { type: 'urn:idempotency:webhook-misconfigured', status: 500 },
      });
      expect(
        await target.db.query(
          `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME} UNION ALL SELECT reference FROM orders`,
        ),
      ).toEqual([]);
    });

    it.each(NOTHING_TO_VERIFY)(
      'answers an unsigned request of content type %s 401, not as a misconfiguration: nothing to verify',
      async (contentType, body) => {
        expect(
          await unsigned(`${target.url}${ROUTES.stripe}`, contentType, body),
        ).toMatchObject(refusalOf(platform, contentType));
      },
    );
  },
);
