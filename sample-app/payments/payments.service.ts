import { Injectable, NotFoundException } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { CreatePaymentDto } from './create-payment.dto.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';

@Injectable()
export class PaymentsService {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
  ) {}

  /**
   * Called from an `@Idempotent()` handler, these plain repository calls run
   * in the request's transaction: the payment, its ledger entries and the
   * stored response commit together, or none of them does.
   */
  async create(dto: CreatePaymentDto): Promise<Payment> {
    const payment = await this.payments.save(this.payments.create(dto));
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
