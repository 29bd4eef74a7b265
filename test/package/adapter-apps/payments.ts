/*
 * The payments handler of the applications outside the repository
 * (adapter-apps.e2e-spec.ts), as test/adapters/payments.controller.ts has
 * it, on the installed package: copied next to each application's own file,
 * which provides its `PaymentsWriter` and starts it.
 */
import {
  BadRequestException,
  Body,
  Controller,
  HttpCode,
  Inject,
  InternalServerErrorException,
  Post,
} from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency';
import pg from 'pg';

/** One statement each, in the handler's transaction, through the library. */
export interface PaymentsWriter {
  insertPayment(key: string, amount: number): Promise<number>;
  insertLedger(paymentId: number, amount: number): Promise<void>;
  backendPid(): Promise<number>;
  raw(sql: string): Promise<void>;
}

/** Injection token of the {@link PaymentsWriter}. */
export const PaymentsWriter = Symbol('PaymentsWriter');

/**
 * The application's pool on `DATABASE_URL`. An idle connection the server
 * ends (a terminated backend, a restart) is an 'error' of the pool, which
 * would end the process unheard: the pool drops it and opens another.
 */
export function appPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  pool.on('error', (error) => {
    console.warn(`Idle connection lost: ${error.message}`);
  });
  return pool;
}

/** What each fault sends by hand between the payment and the ledger. */
const ENDS: Record<string, string> = {
  commit: 'COMMIT',
  'commit-chain': 'COMMIT AND CHAIN',
  'rollback-chain': 'ROLLBACK AND CHAIN',
  'commit-begin': 'COMMIT; BEGIN',
};

/** What each savepoint fault sends around the ledger entries. */
const AROUND: Record<string, readonly string[]> = {
  'savepoint-open': ['SAVEPOINT nested'],
  'savepoint-released': ['SAVEPOINT "Nested"', 'RELEASE SAVEPOINT "Nested"'],
  'savepoint-rolled-back': ['savepoint nested', 'ROLLBACK TO nested'],
  'savepoint-open-commented': ['-- a nested unit\nSAVEPOINT nested'],
  'savepoint-released-commented': [
    '/* begin */ SAVEPOINT nested',
    '-- done\nRELEASE SAVEPOINT nested',
  ],
};

/** Ends the connection of `pid`, from a connection of its own. */
async function terminate(pid: number): Promise<void> {
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    await client.query('SELECT pg_terminate_backend($1, 10000)', [pid]);
  } finally {
    await client.end();
  }
}

@Controller('payments')
export class PaymentsController {
  constructor(
    @Inject(PaymentsWriter) private readonly writer: PaymentsWriter,
  ) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(
    @Body() body: { key: string; amount: number; fault?: string },
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
      await terminate(await this.writer.backendPid());
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
    @Body() body: { key: string; amount: number; fault?: string },
  ): Promise<{ id: number; amount: number; note: string }> {
    return this.create(body);
  }
}
