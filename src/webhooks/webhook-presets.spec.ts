import { createHmac, randomUUID } from 'node:crypto';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import type { WebhookRequest } from './webhook-options.interface.js';
import { WEBHOOK_PRESETS } from './webhook-presets.js';
import { hmacSha256Matches } from './webhook-signatures.js';

/** A delivery of `headers` and `body` as the presets read it. */
function request(
  headers: Record<string, string>,
  body: string,
): WebhookRequest {
  return {
    rawBody: Buffer.from(body),
    header: (name) => headers[name.toLowerCase()],
  };
}

/** Whether the reference library accepts it (it throws otherwise). */
function accepts(verify: () => unknown): boolean {
  try {
    verify();
    return true;
  } catch {
    return false;
  }
}

const BODIES = [
  '{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}',
  '{"type":"ünïcödé ✓","id":"evt_2"}',
  '{}',
];

describe("the presets agree with the providers' own verification", () => {
  const stripeSecret = 'whsec_unit_secret';
  it.each(BODIES)('Stripe: %s', (body) => {
    const header = Stripe.webhooks.generateTestHeaderString({
      payload: body,
      secret: stripeSecret,
    });
    const cases: Array<[string, string, string]> = [
      [header, body, stripeSecret],
      [header, `${body} `, stripeSecret],
      [header, body, 'whsec_other'],
      [header.replace(/v1=[0-9a-f]{4}/, 'v1=0000'), body, stripeSecret],
      [header.replace(/,v1=.*/, ''), body, stripeSecret],
    ];
    for (const [signature, sent, secret] of cases) {
      expect(
        WEBHOOK_PRESETS.stripe.verify(
          request({ 'stripe-signature': signature }, sent),
          [secret],
        ),
      ).toBe(
        accepts(() => Stripe.webhooks.constructEvent(sent, signature, secret)),
      );
    }
  });

  const standardSecret = `whsec_${Buffer.from(randomUUID()).toString('base64')}`;
  it.each(BODIES)('Standard Webhooks: %s', (body) => {
    const id = 'msg_unit';
    const timestamp = new Date();
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
      'webhook-signature': new Webhook(standardSecret).sign(
        id,
        timestamp,
        body,
      ),
    };
    const cases: Array<[Record<string, string>, string, string]> = [
      [headers, body, standardSecret],
      [headers, `${body} `, standardSecret],
      [{ ...headers, 'webhook-id': 'msg_other' }, body, standardSecret],
      [headers, body, `whsec_${Buffer.from('other').toString('base64')}`],
      [
        {
          ...headers,
          'webhook-signature': `v1,AAAA ${headers['webhook-signature']}`,
        },
        body,
        standardSecret,
      ],
    ];
    for (const [sent, payload, secret] of cases) {
      expect(
        WEBHOOK_PRESETS['standard-webhooks'].verify(request(sent, payload), [
          secret,
        ]),
      ).toBe(accepts(() => new Webhook(secret).verify(payload, sent)));
    }
  });
});

describe('hmacSha256Matches', () => {
  const mac = createHmac('sha256', 'key').update('content').digest();

  it('refuses a missing, empty, malformed or truncated signature without throwing', () => {
    const hex = mac.toString('hex');
    for (const given of [undefined, '', 'zz', 'abc', hex.slice(2)]) {
      expect(hmacSha256Matches('key', 'content', given, 'hex')).toBe(false);
    }
    expect(hmacSha256Matches('key', 'content', '!!!', 'base64')).toBe(false);
  });

  it('matches the same HMAC in hex and in base64, and no other content', () => {
    const hex = mac.toString('hex');
    expect(hmacSha256Matches('key', 'content', hex, 'hex')).toBe(true);
    expect(hmacSha256Matches('key', 'content', hex.toUpperCase(), 'hex')).toBe(
      true,
    );
    expect(
      hmacSha256Matches('key', 'content', mac.toString('base64'), 'base64'),
    ).toBe(true);
    expect(hmacSha256Matches('key', 'other', hex, 'hex')).toBe(false);
  });

  it('matches the one text of a signature: no extra nibble, padding or trailing bits', () => {
    const hex = mac.toString('hex');
    const base64 = mac.toString('base64');
    expect(base64).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(
      hmacSha256Matches('key', 'content', base64.slice(0, 43), 'base64'),
    ).toBe(true);
    // The last base64 character carries 4 bits of the digest and 2 unused:
    // another character with the same 4 bits decodes to the same bytes.
    const letters =
      'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    const last = letters.indexOf(base64[42]);
    const sameBits = `${base64.slice(0, 42)}${letters[last ^ 1]}=`;
    expect(Buffer.from(sameBits, 'base64')).toEqual(mac);
    for (const [given, encoding] of [
      [`${hex}f`, 'hex'],
      [`${hex}0`, 'hex'],
      [`${hex}00`, 'hex'],
      [`${base64}=`, 'base64'],
      [`${base64}==`, 'base64'],
      [sameBits, 'base64'],
    ] as const) {
      expect({
        given,
        match: hmacSha256Matches('key', 'content', given, encoding),
      }).toEqual({ given, match: false });
    }
  });
});
