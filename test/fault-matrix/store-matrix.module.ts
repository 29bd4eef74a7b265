import { randomUUID } from 'node:crypto';
import {
  Body,
  Controller,
  HttpException,
  Inject,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { requestCharge } from '../utils/fake-gateway.js';
import { Control } from './control.js';
import {
  GATEWAY_URL,
  LIMIT,
  type PaymentRequest,
} from './fault-matrix.module.js';

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
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly control: Control,
    @Inject(GATEWAY_URL) private readonly gatewayUrl: string,
  ) {}

  /** Charges the gateway in a step (under the derived key), then answers. */
  @Post()
  @Idempotent()
  async create(@Body() body: PaymentRequest): Promise<ChargeResponse> {
    const { reference, amount } = body;
    this.count(reference);
    const charge = await this.idempotency.step('charge', () =>
      requestCharge(
        this.gatewayUrl,
        amount,
        this.idempotency.deriveKey('charge'),
      ),
    );
    await this.control.takeHold(reference)?.wait();
    if (this.control.takeFailure(reference)) {
      throw new ServiceUnavailableException('The ledger is busy: retry');
    }
    return { reference, amount, chargeId: charge.id, receipt: randomUUID() };
  }

  /**
   * Refuses an amount over the limit with a 402 that the error policy
   * stores (`storeErrors`), before charging anything.
   */
  @Post('limited')
  @Idempotent({ storeErrors: true })
  createLimited(@Body() body: PaymentRequest): { receipt: string } {
    const { reference, amount } = body;
    this.count(reference);
    if (amount > LIMIT) {
      throw new HttpException(
        { statusCode: 402, message: 'Over the limit', reference },
        402,
      );
    }
    return { receipt: randomUUID() };
  }

  private count(reference: string): void {
    this.control.runs.set(
      reference,
      (this.control.runs.get(reference) ?? 0) + 1,
    );
  }
}
