/**
 * A `fingerprint` function says which parts of the body count; the method,
 * the route and the path parameters always count besides (I6). One key
 * reused on another route, or on another path parameter, with a body the
 * function maps to the same value, is another request: 422, never the
 * first route's response. Records written by 0.6, whose fingerprint was the
 * function's value alone, are still matched by it until they expire, on
 * their own method and route only; a value in the form of the module's own
 * fingerprints (which a client may make the function return) never is.
 */
import { Body, Controller, HttpCode, Param, Post } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  Idempotent,
  IdempotentWebhook,
  WebhookDelivery,
  type VerifiedWebhook,
} from '../../src/index.js';
import { answer } from '../utils/problems.js';
import {
  eventId,
  payloadOf,
  SECRETS,
  signedDelivery,
} from '../webhooks/signed-deliveries.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

/** Only the amount counts. */
const amountOnly = (context: ExecutionContext) =>
  `amount:${String(
    context.switchToHttp().getRequest<{ body: { amount: number } }>().body
      .amount,
  )}`;

/** The request's `Content-Digest`, which the client chooses. */
const contentDigest = (context: ExecutionContext) =>
  String(
    context.switchToHttp().getRequest<{ headers: Record<string, string> }>()
      .headers['content-digest'],
  );

/** What the handlers ran, in order. */
const ran: string[] = [];

@Controller('fp')
class FingerprintFunctionController {
  @Post('refund/:id')
  @Idempotent({ fingerprint: amountOnly })
  refund(@Param('id') id: string, @Body() body: { amount: number }) {
    ran.push(`refund ${id}`);
    return { refunded: id, amount: body.amount };
  }

  @Post('charge')
  @Idempotent({ fingerprint: amountOnly })
  charge(@Body() body: { amount: number }) {
    ran.push('charge');
    return { charged: body.amount };
  }

  /** Its fingerprint is a header the client sends, as it is. */
  @Post('upload/:id')
  @Idempotent({ fingerprint: contentDigest })
  upload(@Param('id') id: string) {
    ran.push(`upload ${id}`);
    return { uploaded: id };
  }
}

/**
 * A webhook receiver's events are its fingerprint whatever route received
 * them: an old and a new path of one endpoint share them by their scope.
 */
@Controller('fp-hooks')
class MovedReceiverController {
  @Post('old')
  @HttpCode(200)
  @IdempotentWebhook('stripe', {
    secret: SECRETS.stripe[0],
    scope: () => 'moved',
  })
  old(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(`old ${delivery.id}`);
    return { handled: delivery.id };
  }

  @Post('new')
  @HttpCode(200)
  @IdempotentWebhook('stripe', {
    secret: SECRETS.stripe[0],
    scope: () => 'moved',
  })
  new(@WebhookDelivery() delivery: VerifiedWebhook) {
    ran.push(`new ${delivery.id}`);
    return { handled: delivery.id };
  }
}

describe.each(PLATFORMS)('a fingerprint function (%s)', (platform) => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      controllers: [FingerprintFunctionController, MovedReceiverController],
      platform,
      rawBody: true,
      idempotency: { gc: false },
    });
  });
  afterAll(() => target.close());
  beforeEach(() => {
    ran.length = 0;
  });

  const post = (path: string, key: string, body: unknown) =>
    answer(send(target, path, { key, body }));

  it('counts the route and the path parameters besides its value: the same key on another of either is refused with 422', async () => {
    const key = randomUUID();
    expect(await post('/fp/refund/A', key, { amount: 10 })).toMatchObject({
      status: 201,
      replayed: false,
      body: { refunded: 'A', amount: 10 },
    });
    for (const path of ['/fp/refund/B', '/fp/charge']) {
      expect(await post(path, key, { amount: 10 })).toMatchObject({
        status: 422,
        replayed: false,
        body: { type: 'urn:idempotency:key-reused' },
      });
    }
    expect(await post('/fp/refund/A', key, { amount: 10, note: 'x' })).toEqual(
      expect.objectContaining({
        status: 201,
        replayed: true,
        body: { refunded: 'A', amount: 10 },
      }),
    );
    expect(ran).toEqual(['refund A']);
  });

  it('tells apart two values that are not well-formed Unicode (lone surrogates), which UTF-8 writes alike (U+FFFD): the second is refused with 422', async () => {
    const key = randomUUID();
    // Raw JSON text: the amounts reach the function as lone surrogates.
    const raw = (text: string) =>
      answer(
        fetch(`${target.url}/fp/charge`, {
          method: 'POST',
          headers: {
            'Idempotency-Key': key,
            'Content-Type': 'application/json',
          },
          body: text,
        }),
      );
    expect(await raw('{"amount":"\\ud800"}')).toMatchObject({
      status: 201,
      replayed: false,
      body: { charged: '\ud800' },
    });
    for (const other of ['{"amount":"\\ud801"}', '{"amount":"\\ufffd"}']) {
      expect([other, await raw(other)]).toEqual([
        other,
        expect.objectContaining({
          status: 422,
          body: expect.objectContaining({ type: 'urn:idempotency:key-reused' }),
        }),
      ]);
    }
    expect(await raw('{"amount":"\\ud800","note":"x"}')).toMatchObject({
      status: 201,
      replayed: true,
      body: { charged: '\ud800' },
    });
    expect(ran).toEqual(['charge']);
  });

  it("matches a record of 0.6 by the function's value alone until it expires", async () => {
    const key = randomUUID();
    expect(await post('/fp/refund/A', key, { amount: 20 })).toMatchObject({
      status: 201,
    });
    // As 0.6 wrote it: the function's value, nothing else.
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'amount:20' WHERE key = $1`,
      [key],
    );
    expect(await post('/fp/refund/A', key, { amount: 20 })).toMatchObject({
      status: 201,
      replayed: true,
      body: { refunded: 'A', amount: 20 },
    });
    expect(await post('/fp/refund/A', key, { amount: 21 })).toMatchObject({
      status: 422,
    });
    expect(ran).toEqual(['refund A']);
  });

  const fingerprintOf = async (key: string) =>
    (
      await target.db.query<{ fingerprint: string }>(
        `SELECT fingerprint FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      )
    )[0].fingerprint;
  const upload = (path: string, key: string, digest: string) =>
    answer(
      fetch(`${target.url}${path}`, {
        method: 'POST',
        headers: { 'idempotency-key': key, 'content-digest': digest },
      }),
    );
  const REUSED = {
    status: 422,
    replayed: false,
    body: { type: 'urn:idempotency:key-reused' },
  };

  it("never matches a record by a value the function returns that is the record's stored fingerprint: another route's, or its own for another value or path parameter, gets 422", async () => {
    const key = randomUUID();
    expect(await post('/fp/charge', key, { amount: 10 })).toMatchObject({
      status: 201,
    });
    const charge = await fingerprintOf(key);
    expect(await upload('/fp/upload/A', key, charge)).toMatchObject(REUSED);

    const own = randomUUID();
    expect(await upload('/fp/upload/A', own, 'sha-256=:abc=:')).toMatchObject({
      status: 201,
      replayed: false,
    });
    const stored = await fingerprintOf(own);
    for (const path of ['/fp/upload/A', '/fp/upload/B']) {
      expect(await upload(path, own, stored)).toMatchObject(REUSED);
    }
    expect(await upload('/fp/upload/A', own, 'sha-256=:abc=:')).toMatchObject({
      status: 201,
      replayed: true,
      body: { uploaded: 'A' },
    });
    expect(ran).toEqual(['charge', 'upload A']);
  });

  it("matches a record of 0.6 by the function's value only on the method and route it was written for: another route's gets 422", async () => {
    const key = randomUUID();
    expect(await post('/fp/refund/A', key, { amount: 30 })).toMatchObject({
      status: 201,
    });
    // As 0.6 wrote it: the function's value, nothing else.
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'amount:30' WHERE key = $1`,
      [key],
    );
    expect(await post('/fp/charge', key, { amount: 30 })).toMatchObject(REUSED);
    expect(await post('/fp/refund/A', key, { amount: 30 })).toMatchObject({
      status: 201,
      replayed: true,
      body: { refunded: 'A', amount: 30 },
    });
    expect(ran).toEqual(['refund A']);
  });

  it("does not count the route of a webhook receiver's event: a redelivery to the endpoint's new path gets the answer of the old", async () => {
    const id = eventId('stripe');
    const deliver = (path: string) => {
      const { headers, body } = signedDelivery('stripe', {
        id,
        payload: payloadOf('stripe', id),
        secret: SECRETS.stripe[0],
      });
      return answer(
        fetch(`${target.url}${path}`, { method: 'POST', headers, body }),
      );
    };
    expect(await deliver('/fp-hooks/old')).toMatchObject({
      status: 200,
      replayed: false,
    });
    expect(await deliver('/fp-hooks/new')).toMatchObject({
      status: 200,
      replayed: true,
      body: { handled: id },
    });
    expect(ran).toEqual([`old ${id}`]);
  });
});
