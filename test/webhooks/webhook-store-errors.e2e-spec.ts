/**
 * A provider retries a delivery its receiver failed, a 4xx included (a
 * customer not found yet, a validation pipe's 400). A receiver therefore
 * stores no error unless its own `storeErrors` says so: the module's
 * `storeErrors`, set for an API's clients, would answer every retry with
 * the stored error until `ttl`, and the event would never be handled.
 */
import {
  BadRequestException,
  Controller,
  HttpCode,
  Post,
} from '@nestjs/common';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  IdempotentWebhook,
  WebhookDelivery,
  type VerifiedWebhook,
} from '../../src/index.js';
import { answer } from '../utils/problems.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';
import {
  eventId,
  payloadOf,
  SECRETS,
  signedDelivery,
} from './signed-deliveries.js';

const SECRET = SECRETS.stripe[0];
/** The deliveries each receiver ran, by event id. */
const ran: string[] = [];
/** Events whose first delivery fails with 400. */
const failFirst = new Set<string>();

function handle(delivery: VerifiedWebhook) {
  ran.push(delivery.id);
  if (failFirst.delete(delivery.id)) {
    throw new BadRequestException('The customer is not known yet.');
  }
  return { handled: delivery.id };
}

@Controller('store-errors')
class StoreErrorsController {
  @Post('module-default')
  @HttpCode(200)
  @IdempotentWebhook('stripe', { secret: SECRET })
  moduleDefault(@WebhookDelivery() delivery: VerifiedWebhook) {
    return handle(delivery);
  }

  @Post('own')
  @HttpCode(200)
  @IdempotentWebhook('stripe', { secret: SECRET, storeErrors: true })
  own(@WebhookDelivery() delivery: VerifiedWebhook) {
    return handle(delivery);
  }
}

describe.each(PLATFORMS)(
  'a receiver under a module that stores errors (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        controllers: [StoreErrorsController],
        platform,
        rawBody: true,
        idempotency: { gc: false, storeErrors: true },
      });
    });
    afterAll(() => target.close());

    /** Delivers event `id` to `route`, signed anew each time (as Stripe does). */
    const deliver = (route: string, id: string) => {
      const { headers, body } = signedDelivery('stripe', {
        id,
        payload: payloadOf('stripe', id),
        secret: SECRET,
      });
      return answer(
        fetch(`${target.url}/store-errors/${route}`, {
          method: 'POST',
          headers,
          body,
        }),
      );
    };
    const stored = async (id: string) =>
      (
        await target.db.query<{ status: string; response_status: number }>(
          `SELECT status, response_status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [id],
        )
      ).map(({ status, response_status }) => [status, response_status]);

    it("stores no 4xx of the handler, whatever the module's storeErrors: the provider's next delivery runs it", async () => {
      const id = eventId('stripe');
      failFirst.add(id);
      expect(await deliver('module-default', id)).toMatchObject({
        status: 400,
      });
      expect(await stored(id)).toEqual([]);
      expect(await deliver('module-default', id)).toMatchObject({
        status: 200,
        replayed: false,
        body: { handled: id },
      });
      expect(ran.filter((each) => each === id)).toHaveLength(2);
      expect(await stored(id)).toEqual([['completed', 200]]);
    });

    it('stores it when the receiver says so: the next delivery gets it back', async () => {
      const id = eventId('stripe');
      failFirst.add(id);
      expect(await deliver('own', id)).toMatchObject({ status: 400 });
      expect(await deliver('own', id)).toMatchObject({
        status: 400,
        replayed: true,
      });
      expect(ran.filter((each) => each === id)).toHaveLength(1);
      expect(await stored(id)).toEqual([['failed', 400]]);
    });
  },
);
