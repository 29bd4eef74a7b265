import { Body, Controller, Headers, Post, type Type } from '@nestjs/common';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { ModesHandler, WAIT_MS } from './modes.handler.js';

/**
 * The routes of one mode of the modes bench, `POST /modes/light` and
 * `POST /modes/gateway`: {@link ModesHandler.pay} under `decorate()` (an
 * idempotency library's decorator, or none). One class per mode, built
 * here, so that every mode runs the same handler the same way.
 */
export function modeController(
  decorate: () => MethodDecorator = () => () => undefined,
): Type {
  @Controller('modes')
  class ModeController {
    constructor(private readonly handler: ModesHandler) {}

    @Post('light')
    @decorate()
    light(
      @Body() dto: CreatePaymentDto,
      @Headers('idempotency-key') key?: string,
    ): Promise<object> {
      return this.handler.pay(dto, key, WAIT_MS.light);
    }

    @Post('gateway')
    @decorate()
    gateway(
      @Body() dto: CreatePaymentDto,
      @Headers('idempotency-key') key?: string,
    ): Promise<object> {
      return this.handler.pay(dto, key, WAIT_MS.gateway);
    }
  }
  return ModeController;
}
