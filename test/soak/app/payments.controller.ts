import {
  Body,
  Controller,
  Get,
  Inject,
  NotFoundException,
  Param,
  ParseUUIDPipe,
  Post,
  type Type,
} from '@nestjs/common';
import { IdempotencyContext, Idempotent } from 'nestjs-idempotency';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { PaymentGateway } from '../../../sample-app/payments/payment-gateway.js';
import type { PaymentWithLedger } from '../../data-libraries/payment-rows.js';
import type { PaymentsLibrary } from '../../data-libraries/payments-library.js';

/**
 * The sample's payments routes written with `library`: `POST /payments`
 * (`@Idempotent()`) charges through the sample's `PaymentGateway` (its
 * `charge` recovery point), then writes the payment and its ledger rows
 * and reads them back in the handler's transaction
 * (`IdempotencyContext<Transaction>.transaction`), as the sample's
 * `PaymentsService.create` does with TypeORM; `GET /payments/:id` reads
 * one through the application's client. The same answers as the sample's.
 */
export function paymentsController<Client, Transaction>(
  library: PaymentsLibrary<Client, Transaction>,
): Type {
  @Controller('payments')
  class PaymentsController {
    constructor(
      private readonly gateway: PaymentGateway,
      private readonly idempotency: IdempotencyContext<Transaction>,
      @Inject(library.client) private readonly client: Client,
    ) {}

    @Post()
    @Idempotent()
    async create(@Body() dto: CreatePaymentDto): Promise<PaymentWithLedger> {
      const charge = await this.gateway.charge(dto.amount, dto.currency);
      const tx = this.idempotency.transaction;
      const { id } = await library.write(tx, dto, charge.id);
      return found(await library.read(tx, id), id);
    }

    @Get(':id')
    async findOne(
      @Param('id', ParseUUIDPipe) id: string,
    ): Promise<PaymentWithLedger> {
      return found(await library.read(this.client, id), id);
    }
  }
  return PaymentsController;
}

/** `payment`, or the sample's 404 for payment `id`. */
function found(
  payment: PaymentWithLedger | undefined,
  id: string,
): PaymentWithLedger {
  if (!payment) {
    throw new NotFoundException(`Payment ${id} not found`);
  }
  return payment;
}
