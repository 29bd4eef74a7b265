import { Injectable, NotFoundException } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { IdempotencyContext } from 'nestjs-idempotency';
import { Repository } from 'typeorm';
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
    private readonly idempotency: IdempotencyContext,
  ) {}

  /**
   * Called from an `@Idempotent()` handler, these plain repository calls run
   * in the request's transaction: the payment, its ledger entries and the
   * stored response commit together, or none of them does.
   */
  async create(dto: CreatePaymentDto): Promise<Payment> {
    // The charge leaves the database, so it is a recovery point: if this
    // request dies after charging, its retry gets the stored charge back
    // instead of charging again; the gateway sees the same derived key anyway.
    const charge = await this.idempotency.step('charge', () =>
      this.gateway.charge(
        dto.amount,
        dto.currency,
        this.idempotency.deriveKey('charge'),
      ),
    );
    const payment = await this.payments.save(
      this.payments.create({ ...dto, chargeId: charge.id }),
    );
    await this.ledger.save([
      this.ledger.create({
        paymentId: payment.id,
        account: 'customer',
        direction: 'debit',
        amount: dto.amount,
      }),
      this.ledger.create({
        paymentId: payment.id,
        account: `merchant:${dto.merchantId}`,
        direction: 'credit',
        amount: dto.amount,
      }),
    ]);
    // Read back in the same transaction, so POST and GET return one shape.
    return this.findOne(payment.id);
  }

  async findOne(id: string): Promise<Payment> {
    const payment = await this.payments.findOne({
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
