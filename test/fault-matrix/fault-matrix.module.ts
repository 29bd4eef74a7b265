import { Body, Controller, Module, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import {
  Charging,
  chargingProviders,
  type PaymentRequest,
} from './charging.js';
import { Control } from './control.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';

export { Control };

/** What `POST /payments` answers. */
export interface PaymentResponse {
  readonly paymentId: number;
  readonly chargeId: string;
  readonly amount: number;
}

@Controller('payments')
export class PaymentsController {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
    private readonly charging: Charging,
  ) {}

  /**
   * Charges the gateway in a recovery point (under the derived key), then
   * books the payment and its two ledger entries.
   */
  @Post()
  @Idempotent()
  async create(@Body() body: PaymentRequest): Promise<PaymentResponse> {
    const { reference, amount } = body;
    const charge = await this.charging.charge(body);
    const { identifiers } = await this.payments.insert({
      reference,
      amount,
      chargeId: charge.id,
    });
    const paymentId = (identifiers[0] as { id: number }).id;
    this.charging.failIfTold(reference);
    await this.ledger.insert({
      paymentId,
      account: 'customer',
      amount: -amount,
    });
    await this.ledger.insert({ paymentId, account: 'merchant', amount });
    return { paymentId, chargeId: charge.id, amount };
  }

  /**
   * Books the payment unless it is over the limit: then a 402 that the error
   * policy stores (`storeErrors`), its write rolled back.
   */
  @Post('limited')
  @Idempotent({ storeErrors: true })
  createLimited(@Body() body: PaymentRequest): Promise<{ paymentId: number }> {
    return this.charging.limited(body, async (reference, amount) => {
      const { identifiers } = await this.payments.insert({
        reference,
        amount,
        chargeId: null,
      });
      return (identifiers[0] as { id: number }).id;
    });
  }
}

/** The payments application of the fault matrix, charging the gateway at `gatewayUrl`. */
export function faultMatrixModule(gatewayUrl: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Payment, LedgerEntry])],
    controllers: [PaymentsController],
    providers: chargingProviders(gatewayUrl),
  })
  class FaultMatrixTestModule {}
  return FaultMatrixTestModule;
}
