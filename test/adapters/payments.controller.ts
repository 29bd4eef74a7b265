import {
  Body,
  Controller,
  HttpCode,
  Inject,
  InternalServerErrorException,
  Post,
} from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { PaymentsWriter } from './adapter-fixture.js';

/** Ends the connection of a server process, from another connection. */
export const TERMINATOR = Symbol('Terminator');

/** What a payment request asks of the handler, beside its amount. */
export type PaymentFault =
  /** Throws once its rows are written. */
  | 'throw'
  /** Writes a ledger entry of no payment: the deferred key fails at COMMIT. */
  | 'deferred'
  /** Has its connection terminated once its rows are written. */
  | 'terminate'
  /** Sends COMMIT by hand between its payment and its ledger entries. */
  | 'commit';

/**
 * The payments handler of the adapters' suites, the same on every data
 * library: a payment and two ledger entries, written through the library's
 * handle of the handler's transaction (`PaymentsWriter`).
 */
@Controller('payments')
export class PaymentsController {
  constructor(
    @Inject(PaymentsWriter) private readonly writer: PaymentsWriter,
    @Inject(TERMINATOR)
    private readonly terminate: (pid: number) => Promise<void>,
  ) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(
    @Body() body: { key: string; amount: number; fault?: PaymentFault },
  ): Promise<{ id: number; amount: number; note: string }> {
    const id = await this.writer.insertPayment(body.key, body.amount);
    if (body.fault === 'commit') {
      await this.writer.raw('COMMIT');
    }
    await this.writer.insertLedger(id, body.amount);
    await this.writer.insertLedger(
      body.fault === 'deferred' ? -id : id,
      -body.amount,
    );
    if (body.fault === 'terminate') {
      await this.terminate(await this.writer.backendPid());
    }
    if (body.fault === 'throw') {
      throw new InternalServerErrorException('the handler failed');
    }
    return { id, amount: body.amount, note: `paid ${body.amount}` };
  }
}
