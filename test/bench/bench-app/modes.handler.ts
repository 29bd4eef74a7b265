import { Inject, Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import {
  standInCharge,
  type Charge,
} from '../../../sample-app/payments/payment-gateway.js';
import { plainKey } from './bench.controller.js';
import { Booking } from './data-library.js';

/** The two settings of the modes bench: the gateway's answer, in ms. */
export const WAIT_MS = {
  light: 0,
  gateway: Number(process.env.BENCH_GATEWAY_MS ?? 50),
} as const;

/** A setting of the modes bench, and the route that runs it. */
export type ModeSetting = keyof typeof WAIT_MS;

/**
 * The gateway stand-in's charge under the request's `key`, after `waitMs`
 * (a payment gateway's answer).
 */
export async function charge(
  key: string | undefined,
  waitMs: number,
): Promise<Charge> {
  if (waitMs > 0) {
    await sleep(waitMs);
  }
  // The request's key names the charge in every mode, derived as the
  // module derives its own (a UUID of a hash of it).
  return standInCharge(plainKey(key));
}

/**
 * The one handler of every mode of the modes bench, so that the modes
 * differ only in what wraps it and in the data library it writes with:
 * it awaits the gateway stand-in ({@link charge}), then the mode's
 * {@link Booking} writes one payment and its two ledger rows (in a
 * transaction the library begins after the charge, as an application
 * without the module writes it: no connection held while the gateway
 * answers; or in the module's transaction, which begins at the first
 * write). Reads nothing back.
 */
@Injectable()
export class ModesHandler {
  constructor(@Inject(Booking) private readonly booking: Booking) {}

  async pay(
    dto: CreatePaymentDto,
    key: string | undefined,
    waitMs: number,
  ): Promise<object> {
    const { id } = await charge(key, waitMs);
    return this.booking.book(dto, id);
  }
}
