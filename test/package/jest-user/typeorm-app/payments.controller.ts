import { Body, Controller, Header, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency';

@Controller('payments')
export class PaymentsController {
  /** How many payments the handler made. */
  executions = 0;

  @Post()
  @Header('Location', '/payments/latest')
  @Idempotent()
  create(@Body() body: { reference: string }): {
    execution: number;
    reference: string;
  } {
    this.executions += 1;
    return { execution: this.executions, reference: body.reference };
  }
}
