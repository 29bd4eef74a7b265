import { Injectable } from '@nestjs/common';
import { IdempotencyContext } from 'nestjs-idempotency';
import { createHash } from 'node:crypto';

/** What the gateway answers for a charge. */
export interface Charge {
  id: string;
}

/**
 * What the stand-in gateway answers for a charge under `idempotencyKey`: the
 * same id for the same key, as real gateways do.
 */
export function standInCharge(idempotencyKey: string): Charge {
  const digest = createHash('sha256').update(idempotencyKey).digest('hex');
  return { id: `ch_${digest.slice(0, 16)}` };
}

/**
 * The payment provider, called from an `@Idempotent()` handler. With
 * `GATEWAY_URL` set it calls that HTTP service (`POST /charges`) through
 * `IdempotencyContext.fetch()`: a recovery point whose answer is stored,
 * sent with the request's derived key (`deriveKey('charge')`: a UUID made
 * of the request's scope, key and fingerprint and of the key's generation,
 * the same for every retry of the request) and sent again with it on
 * network errors, timeouts, 409, 429 and 5xx. Otherwise it stands in for
 * one, answering the same charge id for the same key, as real gateways do.
 */
@Injectable()
export class PaymentGateway {
  private readonly url = process.env.GATEWAY_URL;

  constructor(private readonly idempotency: IdempotencyContext) {}

  async charge(amount: number, currency: string): Promise<Charge> {
    if (!this.url) {
      return this.idempotency.step('charge', () =>
        standInCharge(this.idempotency.deriveKey('charge')),
      );
    }
    // A refusal (a 4xx but 409 and 429) is answered 502; no answer in time,
    // 503: the client retries with the same key.
    const response = await this.idempotency.fetch(
      'charge',
      `${this.url}/charges`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount, currency }),
      },
    );
    return (await response.json()) as Charge;
  }
}
