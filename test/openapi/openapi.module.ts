import {
  Body,
  Controller,
  Get,
  HttpCode,
  Module,
  Param,
  Post,
  Put,
} from '@nestjs/common';
import {
  ApiConflictResponse,
  ApiCreatedResponse,
  ApiHeader,
  ApiProperty,
  ApiServiceUnavailableResponse,
} from '@nestjs/swagger';
import { Idempotent } from '../../src/index.js';

export class Payment {
  @ApiProperty()
  id!: string;

  @ApiProperty()
  amount!: number;
}

export class RefundRefusal {
  @ApiProperty()
  reason!: string;
}

/** Routes as users document them, and some they do not document at all. */
@Controller('payments')
export class PaymentsController {
  /** Documents nothing itself: @nestjs/swagger would infer a bare 201. */
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    return { id: 'p-1', amount: body.amount };
  }

  /** Documents its own 201 and a 409 of its own. */
  @Post(':id/refunds')
  @Idempotent({ required: false })
  @ApiCreatedResponse({ type: Payment, description: 'The refund' })
  @ApiConflictResponse({
    type: RefundRefusal,
    description: 'The refund exceeds the charge',
  })
  refund(@Param('id') id: string) {
    return { id, amount: -1 };
  }

  /** Takes its key from the path: no header to document. */
  @Put(':id')
  @HttpCode(200)
  @Idempotent({
    key: (context) =>
      context.switchToHttp().getRequest<{ params: { id: string } }>().params.id,
  })
  replace(@Param('id') id: string) {
    return { id, amount: 0 };
  }

  /** Documents the key header itself. */
  @Post('captures')
  @Idempotent({ ttl: '7d' })
  @ApiHeader({ name: 'idempotency-key', description: 'Our own words' })
  capture() {
    return { id: 'c-1', amount: 1 };
  }

  /** Not decorated: the module adds nothing. */
  @Get()
  list() {
    return [];
  }

  /** Not decorated, and a POST. */
  @Post('quotes')
  quote() {
    return { amount: 1 };
  }
}

/** A controller that documents a 503 for all of its routes. */
@Controller('transfers')
@ApiServiceUnavailableResponse({ description: 'The bank is closed' })
@Idempotent({ keyValidation: { maxLength: 64, pattern: /^[0-9a-f-]+$/ } })
export class TransfersController {
  @Post()
  create() {
    return { id: 't-1' };
  }
}

/** Keys of letters, of either case: a pattern with a flag. */
@Controller('codes')
@Idempotent({ keyValidation: { maxLength: 64, pattern: /^[a-z]+$/i } })
export class CodesController {
  @Post()
  create() {
    return { id: 'c-1' };
  }
}

/**
 * A controller as the `@nestjs/swagger` CLI plugin compiles it: a static
 * factory with the response type it inferred from the return type.
 */
@Controller('invoices')
export class InvoicesController {
  static _OPENAPI_METADATA_FACTORY() {
    return { create: { type: Payment } };
  }

  @Post()
  @Idempotent()
  create() {
    return { id: 'i-1', amount: 2 };
  }
}

@Module({
  controllers: [
    PaymentsController,
    TransfersController,
    CodesController,
    InvoicesController,
  ],
})
export class OpenApiTestModule {}
