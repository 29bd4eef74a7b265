import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EntityManager, Repository } from 'typeorm';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { LedgerEntry } from '../../../sample-app/payments/ledger-entry.entity.js';
import { Payment } from '../../../sample-app/payments/payment.entity.js';
import { standInCharge } from '../../../sample-app/payments/payment-gateway.js';
import { writePayment } from '../../../sample-app/payments/payments.service.js';
import { plainKey } from './bench.controller.js';

/** The two settings of the modes bench: the gateway's answer, in ms. */
export const WAIT_MS = {
  light: 0,
  gateway: Number(process.env.BENCH_GATEWAY_MS ?? 50),
} as const;

/** A setting of the modes bench, and the route that runs it. */
export type ModeSetting = keyof typeof WAIT_MS;

/**
 * The one handler of every mode of the modes bench, so that the modes
 * differ only in what wraps it: `charge()` awaits the gateway stand-in
 * (after `waitMs`, a payment gateway's answer), then `book()` saves one
 * payment and its two ledger rows through TypeORM repositories:
 * `manager`'s (a transaction the caller begins after the charge, as an
 * application without the module writes it: no connection held while the
 * gateway answers), or the injected ones (under the PostgreSQL store, the
 * module's transaction, which begins at the first write). Reads nothing
 * back.
 */
@Injectable()
export class ModesHandler {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
  ) {}

  /** The gateway's charge of `dto`, after `waitMs`. */
  async charge(
    _dto: CreatePaymentDto,
    key: string | undefined,
    waitMs: number,
  ): Promise<{ readonly id: string }> {
    if (waitMs > 0) {
      await sleep(waitMs);
    }
    // The request's key names the charge in every mode, derived as the
    // module derives its own (a UUID of a hash of it).
    return standInCharge(plainKey(key));
  }

  /** The payment of `charge` and its ledger rows, through `manager` if given. */
  async book(
    dto: CreatePaymentDto,
    charge: { readonly id: string },
    manager?: EntityManager,
  ): Promise<Payment> {
    const payments = manager?.getRepository(Payment) ?? this.payments;
    const ledger = manager?.getRepository(LedgerEntry) ?? this.ledger;
    return writePayment(payments, ledger, dto, charge.id);
  }
}
