import { Controller, ValidationPipe } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { Idempotent } from 'nestjs-idempotency';
import { CreatePaymentDto } from '../payments/create-payment.dto.js';
import { PaymentsService } from '../payments/payments.service.js';

/** The event a producer publishes to ask for a payment. */
export const PAYMENT_REQUESTED = 'payment.requested';

@Controller()
export class PaymentsConsumer {
  constructor(private readonly payments: PaymentsService) {}

  /**
   * Each message carries its idempotency key as the AMQP `messageId` (or as
   * an `idempotencyKey` field of its data). The payment, its ledger entries
   * and the record of the key commit in one transaction; the message is
   * acknowledged only after that commit. A redelivered copy (after a crash,
   * or published twice) is acknowledged and dropped; a copy that arrives
   * while the first is still running waits for its outcome.
   */
  @EventPattern(PAYMENT_REQUESTED)
  @Idempotent({ acknowledge: true, concurrency: 'wait' })
  async requested(
    @Payload(
      new ValidationPipe({
        whitelist: true,
        forbidNonWhitelisted: true,
        transform: true,
      }),
    )
    request: CreatePaymentDto,
  ): Promise<void> {
    await this.payments.create(request);
  }
}
