import {
  Body,
  Controller,
  Get,
  Param,
  ParseUUIDPipe,
  Post,
} from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency';
import { CreatePaymentDto } from './create-payment.dto.js';
import { Payment } from './payment.entity.js';
import { PaymentsService } from './payments.service.js';

@Controller('payments')
export class PaymentsController {
  constructor(private readonly payments: PaymentsService) {}

  /**
   * Needs an `Idempotency-Key` header. A retry with the same key and body
   * gets the first response back, byte for byte, and charges nothing again.
   */
  @Post()
  @Idempotent()
  create(@Body() dto: CreatePaymentDto): Promise<Payment> {
    return this.payments.create(dto);
  }

  @Get(':id')
  findOne(@Param('id', ParseUUIDPipe) id: string): Promise<Payment> {
    return this.payments.findOne(id);
  }
}
