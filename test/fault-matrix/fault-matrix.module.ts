import {
  Body,
  Controller,
  HttpException,
  Inject,
  Module,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { requestCharge } from '../utils/fake-gateway.js';
import { Control } from './control.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';

export { Control };

export const GATEWAY_URL = Symbol('GATEWAY_URL');

/** The request body of both routes. */
export interface PaymentRequest {
  readonly reference: string;
  readonly amount: number;
}

/** What `POST /payments` answers. */
export interface PaymentResponse {
  readonly paymentId: number;
  readonly chargeId: string;
  readonly amount: number;
}

/** Highest amount `POST /payments/limited` takes. */
export const LIMIT = 1000;

@Controller('payments')
export class PaymentsController {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
    private readonly idempotency: IdempotencyContext,
    private readonly control: Control,
    @Inject(GATEWAY_URL) private readonly gatewayUrl: string,
  ) {}

  /**
   * Charges the gateway in a recovery point (under the derived key), then
   * books the payment and its two ledger entries.
   */
  @Post()
  @Idempotent()
  async create(@Body() body: PaymentRequest): Promise<PaymentResponse> {
    const { reference, amount } = body;
    this.control.runs.set(
      reference,
      (this.control.runs.get(reference) ?? 0) + 1,
    );
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    await this.control.takeHold(reference)?.wait();
    const { identifiers } = await this.payments.insert({
      reference,
      amount,
      chargeId: charge.id,
    });
    const paymentId = (identifiers[0] as { id: number }).id;
    if (this.control.takeFailure(reference)) {
      throw new ServiceUnavailableException('The ledger is busy: retry');
    }
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
  async createLimited(
    @Body() body: PaymentRequest,
  ): Promise<{ paymentId: number }> {
    const { reference, amount } = body;
    this.control.runs.set(
      reference,
      (this.control.runs.get(reference) ?? 0) + 1,
    );
    const { identifiers } = await this.payments.insert({
      reference,
      amount,
      chargeId: null,
    });
    if (amount > LIMIT) {
      throw new HttpException(
        { statusCode: 402, message: 'Over the limit', reference },
        402,
      );
    }
    return { paymentId: (identifiers[0] as { id: number }).id };
  }
}

/** The payments application of the fault matrix, charging the gateway at `gatewayUrl`. */
export function faultMatrixModule(gatewayUrl: string) {
  @Module({
    imports: [TypeOrmModule.forFeature([Payment, LedgerEntry])],
    controllers: [PaymentsController],
    providers: [Control, { provide: GATEWAY_URL, useValue: gatewayUrl }],
  })
  class FaultMatrixTestModule {}
  return FaultMatrixTestModule;
}
