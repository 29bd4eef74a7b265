import { randomUUID } from 'node:crypto';
import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import type { IdempotencyStoreOption } from '../../src/stores/index.js';
import { startStoreApp, type StoreApp } from '../utils/store-app.js';
import type { Platform } from '../utils/test-app.js';
import {
  Charging,
  chargingProviders,
  type PaymentRequest,
} from './charging.js';

/** What `POST /payments` answers on a store other than PostgreSQL. */
export interface ChargeResponse {
  readonly reference: string;
  readonly amount: number;
  /** The gateway's charge, made in the `charge` step. */
  readonly chargeId: string;
  /** Another on every run of the handler: a replay returns this very one. */
  readonly receipt: string;
}

/**
 * The payments of the fault matrix on a store other than PostgreSQL: the
 * handler's only effect is the gateway's charge, in a recovery point, and
 * its answer (no database, no transaction: the record completes in the
 * store right after the handler).
 */
@Controller('payments')
export class StorePaymentsController {
  constructor(private readonly charging: Charging) {}

  /** Charges the gateway in a step (under the derived key), then answers. */
  @Post()
  @Idempotent()
  async create(@Body() body: PaymentRequest): Promise<ChargeResponse> {
    const { reference, amount } = body;
    const charge = await this.charging.charge(body);
    this.charging.failIfTold(reference);
    return { reference, amount, chargeId: charge.id, receipt: randomUUID() };
  }

  /**
   * Refuses an amount over the limit with a 402 that the error policy
   * stores (`storeErrors`), before charging anything.
   */
  @Post('limited')
  @Idempotent({ storeErrors: true })
  createLimited(@Body() body: PaymentRequest): { receipt: string } {
    this.charging.count(body.reference);
    this.charging.refuseOverLimit(body);
    return { receipt: randomUUID() };
  }
}

/**
 * The matrix's payments on `platform` and `store` (claims leased for
 * `leaseMs`), charging the gateway at `gatewayUrl`.
 */
export function startStorePayments(
  platform: Platform,
  store: IdempotencyStoreOption,
  gatewayUrl: string,
  leaseMs: number,
): Promise<StoreApp> {
  return startStoreApp({
    platform,
    store,
    controllers: [StorePaymentsController],
    providers: chargingProviders(gatewayUrl),
    idempotency: { lease: `${leaseMs}ms` },
  });
}
