import {
  BadRequestException,
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
  | 'commit'
  /** The same with `COMMIT AND CHAIN`: a new transaction begins at once. */
  | 'commit-chain'
  /**
   * Sends `ROLLBACK AND CHAIN` by hand once its payment is written, which
   * undoes it, and returns (no ledger entry refers to the lost payment).
   */
  | 'rollback-chain'
  /** The same with `COMMIT; BEGIN`, in one simple query. */
  | 'commit-begin'
  /**
   * Writes its ledger entries in a savepoint (`SAVEPOINT nested`) that it
   * never releases, as a nested transaction it did not await would.
   */
  | 'savepoint-open'
  /** The same, released (`"Nested"`, quoted): the entries commit. */
  | 'savepoint-released'
  /** The same, rolled back to (`ROLLBACK TO`): the entries are undone. */
  | 'savepoint-rolled-back'
  /** `savepoint-open`, the savepoint sent after a line comment. */
  | 'savepoint-open-commented'
  /** `savepoint-released`, both statements sent after comments. */
  | 'savepoint-released-commented'
  /**
   * Sets its transaction's `search_path` to a tenant's schema, which has
   * none of the module's tables (`SET LOCAL`), once its rows are written.
   */
  | 'search-path'
  /**
   * Sends a statement that fails once its rows are written, catches its
   * error and returns: its transaction is aborted.
   */
  | 'swallowed'
  /** The same with a deadlock (SQLSTATE 40P01), which a retry may not meet. */
  | 'swallowed-deadlock';

/** What each fault sends by hand between the payment and the ledger. */
const ENDS: Partial<Record<PaymentFault, string>> = {
  commit: 'COMMIT',
  'commit-chain': 'COMMIT AND CHAIN',
  'rollback-chain': 'ROLLBACK AND CHAIN',
  'commit-begin': 'COMMIT; BEGIN',
};

/** What each savepoint fault sends around the ledger entries. */
const AROUND: Partial<Record<PaymentFault, readonly string[]>> = {
  'savepoint-open': ['SAVEPOINT nested'],
  'savepoint-released': ['SAVEPOINT "Nested"', 'RELEASE SAVEPOINT "Nested"'],
  'savepoint-rolled-back': ['savepoint nested', 'ROLLBACK TO nested'],
  'savepoint-open-commented': ['-- a nested unit\nSAVEPOINT nested'],
  'savepoint-released-commented': [
    '/* begin */ SAVEPOINT nested',
    '-- done\nRELEASE SAVEPOINT nested',
  ],
};

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
    const end = body.fault && ENDS[body.fault];
    if (end) {
      await this.writer.raw(end);
    }
    if (body.fault === 'rollback-chain') {
      return { id, amount: body.amount, note: `paid ${body.amount}` };
    }
    const [open, close] = (body.fault && AROUND[body.fault]) || [];
    if (open) {
      await this.writer.raw(open);
    }
    await this.writer.insertLedger(id, body.amount);
    await this.writer.insertLedger(
      body.fault === 'deferred' ? -id : id,
      -body.amount,
    );
    if (close) {
      await this.writer.raw(close);
    }
    if (body.fault === 'swallowed') {
      await this.writer.raw('SELECT 1 / 0').catch(() => undefined);
    }
    if (body.fault === 'swallowed-deadlock') {
      await this.writer
        .raw(
          "DO $$ BEGIN RAISE EXCEPTION 'a deadlock' USING ERRCODE = '40P01'; END $$",
        )
        .catch(() => undefined);
    }
    if (body.fault === 'search-path') {
      await this.writer.raw('SET LOCAL search_path TO payments_tenant');
    }
    if (body.fault === 'terminate') {
      await this.terminate(await this.writer.backendPid());
    }
    if (body.fault === 'throw') {
      throw new InternalServerErrorException('the handler failed');
    }
    return { id, amount: body.amount, note: `paid ${body.amount}` };
  }

  /**
   * Writes a payment, sends `end` and then `then` (their failures caught),
   * then rejects the request: an error answer the route stores, unless the
   * transaction was ended underneath.
   */
  @Post('rejected')
  @Idempotent({ storeErrors: true })
  async reject(
    @Body() body: { key: string; end: string; then?: string },
  ): Promise<never> {
    await this.writer.insertPayment(body.key, 1);
    await this.writer.raw(body.end).catch(() => undefined);
    if (body.then) {
      await this.writer.raw(body.then).catch(() => undefined);
    }
    throw new BadRequestException('the amount is over the limit');
  }

  /** The same handler on a route where the key is optional. */
  @Post('optional')
  @HttpCode(201)
  @Idempotent({ required: false })
  createOptional(
    @Body() body: { key: string; amount: number; fault?: PaymentFault },
  ): Promise<{ id: number; amount: number; note: string }> {
    return this.create(body);
  }
}
