import { Injectable, NotFoundException } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { CreatePaymentDto } from './create-payment.dto.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';
import { PaymentGateway } from './payment-gateway.js';

@Injectable()
export class PaymentsService {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
    private readonly gateway: PaymentGateway,
  ) {}

  /**
   * Called from an `@Idempotent()` handler, these plain repository calls run
   * in the request's transaction: the payment, its ledger entries and the
   * stored response commit together, or none of them does.
   */
  async create(dto: CreatePaymentDto): Promise<Payment> {
    // The charge leaves the database, so it is a recovery point (see
    // PaymentGateway): if this request dies after charging, its retry gets
    // the stored charge back instead of charging again; the gateway sees the
    // same derived key anyway.
    const charge = await this.gateway.charge(dto.amount, dto.currency);
    return this.book(dto, charge.id);
  }

  /**
   * Writes the payment of a charge and its two ledger entries, and reads it
   * back (so POST and GET return one shape): through the injected
   * repositories (in an `@Idempotent()` handler, the request's transaction),
   * or through `manager`, a transaction of the caller's.
   */
  async book(
    dto: CreatePaymentDto,
    chargeId: string,
    manager?: EntityManager,
  ): Promise<Payment> {
    const payments = manager?.getRepository(Payment) ?? this.payments;
    const ledger = manager?.getRepository(LedgerEntry) ?? this.ledger;
    const payment = await writePayment(payments, ledger, dto, chargeId);
    return this.read(payments, payment.id);
  }

  findOne(id: string): Promise<Payment> {
    return this.read(this.payments, id);
  }

  private async read(
    payments: Repository<Payment>,
    id: string,
  ): Promise<Payment> {
    const payment = await payments.findOne({
      where: { id },
      relations: { ledgerEntries: true },
      order: { ledgerEntries: { id: 'ASC' } },
    });
    if (!payment) {
      throw new NotFoundException(`Payment ${id} not found`);
    }
    return payment;
  }
}

/**
 * Writes the payment of a charge and its two ledger entries (a debit of the
 * customer, a credit of the merchant) through `payments` and `ledger`, and
 * returns the payment as saved (without its entries).
 */
export async function writePayment(
  payments: Repository<Payment>,
  ledger: Repository<LedgerEntry>,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<Payment> {
  const payment = await payments.save(payments.create({ ...dto, chargeId }));
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
  return payment;
}
