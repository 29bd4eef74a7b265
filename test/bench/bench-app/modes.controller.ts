import { Body, Controller, Headers, Post, type Type } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import type { Payment } from '../../../sample-app/payments/payment.entity.js';
import { ModesHandler, WAIT_MS } from './modes.handler.js';

/** How a mode's routes get the transaction their writes commit in. */
export type ModeTransaction =
  /** `dataSource.transaction(...)`: the mode gives none. */
  | 'own'
  /** The injected repositories: the idempotency module's (PostgreSQL store). */
  | 'module';

/**
 * The routes of one mode of the modes bench, `POST /modes/light` and
 * `POST /modes/gateway`: {@link ModesHandler.pay} under `decorate()` (an
 * idempotency library's decorator, or none), its writes in the transaction
 * `transaction` says. One class per mode, built here, so that every mode
 * runs the same handler the same way.
 */
export function modeController(
  transaction: ModeTransaction,
  decorate: () => MethodDecorator = () => () => undefined,
): Type {
  @Controller('modes')
  class ModeController {
    constructor(
      private readonly handler: ModesHandler,
      @InjectDataSource() private readonly dataSource: DataSource,
    ) {}

    @Post('light')
    @decorate()
    light(
      @Body() dto: CreatePaymentDto,
      @Headers('idempotency-key') key?: string,
    ): Promise<Payment> {
      return this.pay(dto, key, WAIT_MS.light);
    }

    @Post('gateway')
    @decorate()
    gateway(
      @Body() dto: CreatePaymentDto,
      @Headers('idempotency-key') key?: string,
    ): Promise<Payment> {
      return this.pay(dto, key, WAIT_MS.gateway);
    }

    private async pay(
      dto: CreatePaymentDto,
      key: string | undefined,
      waitMs: number,
    ): Promise<Payment> {
      const charge = await this.handler.charge(dto, key, waitMs);
      return transaction === 'module'
        ? this.handler.book(dto, charge)
        : this.dataSource.transaction((manager) =>
            this.handler.book(dto, charge, manager),
          );
    }
  }
  return ModeController;
}
