import { Injectable } from '@nestjs/common';
import type { Repository } from 'typeorm';
import type { CreatePaymentDto } from '../payments/create-payment.dto.js';
import { LedgerEntry } from '../payments/ledger-entry.entity.js';
import { Payment } from '../payments/payment.entity.js';
import { PaymentGateway } from '../payments/payment-gateway.js';

/** The repositories a payment is written through. */
export interface PaymentRepositories {
  readonly payments: Repository<Payment>;
  readonly ledger: Repository<LedgerEntry>;
}

/**
 * The body of `PaymentsService.create()` without its recovery point: the
 * gateway is called directly, then the payment and its ledger entries are
 * written and read back. The benchmark runs it once as an `@Idempotent()`
 * handler and once in a plain `dataSource.transaction()`, so that the two
 * differ by the idempotency module only.
 */
@Injectable()
export class BenchPaymentsService {
  constructor(private readonly gateway: PaymentGateway) {}

  async create(
    repositories: PaymentRepositories,
    dto: CreatePaymentDto,
    chargeKey: string,
  ): Promise<Payment> {
    const { payments, ledger } = repositories;
    const charge = await this.gateway.charge(
      dto.amount,
      dto.currency,
      chargeKey,
    );
    const payment = await payments.save(
      payments.create({ ...dto, chargeId: charge.id }),
    );
    await ledger.save([
      ledger.create({
        paymentId: payment.id,
        account: 'customer',
        direction: 'debit',
        amount: dto.amount,
      }),
      ledger.create({
        paymentId: payment.id,
        account: `merchant:${dto.merchantId}`,
        direction: 'credit',
        amount: dto.amount,
      }),
    ]);
    // Read back in the same transaction, as POST /payments does.
    return payments.findOneOrFail({
      where: { id: payment.id },
      relations: { ledgerEntries: true },
      order: { ledgerEntries: { id: 'ASC' } },
    });
  }
}
