import {
  HttpException,
  Inject,
  Injectable,
  ServiceUnavailableException,
} from '@nestjs/common';
import { IdempotencyContext } from '../../src/index.js';
import { requestCharge } from '../utils/fake-gateway.js';
import { Control } from './control.js';

export const GATEWAY_URL = Symbol('GATEWAY_URL');

/** Highest amount `POST /payments/limited` takes. */
export const LIMIT = 1000;

/** The request body of both routes. */
export interface PaymentRequest {
  readonly reference: string;
  readonly amount: number;
}

/**
 * What the payments handlers of the matrix's applications (PostgreSQL and
 * the other stores) do alike: count their runs, charge the gateway in a
 * recovery point, wait or fail when the test's {@link Control} says so,
 * refuse an amount over {@link LIMIT}.
 */
@Injectable()
export class Charging {
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly control: Control,
    @Inject(GATEWAY_URL) private readonly gatewayUrl: string,
  ) {}

  /** Counts a run of the handler for `reference` (`Control.runs`). */
  count(reference: string): void {
    this.control.runs.set(
      reference,
      (this.control.runs.get(reference) ?? 0) + 1,
    );
  }

  /**
   * Counts the run, charges `amount` in the `charge` step (under its
   * derived key), then waits if the test holds the run after its charge.
   */
  async charge(body: PaymentRequest): Promise<{ id: string }> {
    this.count(body.reference);
    const charge = await this.idempotency.step('charge', () => {
      const key = this.idempotency.deriveKey('charge');
      this.control.derivedKey(body.reference, key);
      return requestCharge(this.gatewayUrl, body.amount, key);
    });
    await this.control.takeHold(body.reference)?.wait();
    return charge;
  }

  /** Fails this run with the handler's own 503 if the test said so. */
  failIfTold(reference: string): void {
    if (this.control.takeFailure(reference)) {
      throw new ServiceUnavailableException('The ledger is busy: retry');
    }
  }

  /**
   * `POST /payments/limited`: counts the run, writes a payment of no charge
   * with `insert` (which returns its id), then refuses an amount over the
   * limit with a 402 (which the error policy stores, the write rolled back).
   */
  async limited(
    body: PaymentRequest,
    insert: (reference: string, amount: number) => Promise<number>,
  ): Promise<{ paymentId: number }> {
    this.count(body.reference);
    const paymentId = await insert(body.reference, body.amount);
    this.refuseOverLimit(body);
    return { paymentId };
  }

  /** A 402 (which the error policy stores) for an amount over the limit. */
  refuseOverLimit({ reference, amount }: PaymentRequest): void {
    if (amount > LIMIT) {
      throw new HttpException(
        { statusCode: 402, message: 'Over the limit', reference },
        402,
      );
    }
  }
}

/** The providers of the matrix's applications, charging the gateway at `gatewayUrl`. */
export const chargingProviders = (gatewayUrl: string) => [
  Control,
  Charging,
  { provide: GATEWAY_URL, useValue: gatewayUrl },
];
