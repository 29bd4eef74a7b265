/**
 * Work a handler starts and does not await, on every data library: a
 * statement it sends once the handler returned, while the record completes
 * on its own (the handler wrote nothing before), is refused. It never
 * begins a transaction that commits apart from the record.
 */
import { randomUUID } from 'node:crypto';
import { Body, Controller, HttpCode, Inject, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { Barrier, untilBlocked } from '../utils/barrier.js';
import { holdInTransaction } from '../utils/test-database.js';
import { PaymentsWriter } from './adapter-fixture.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import { ADAPTERS } from './adapters.js';

/** Where each request's handler waits before it returns, by key. */
const returning = new Map<string, Barrier>();
/** What starts each request's late write, and its outcome, by key. */
const lateWrites = new Map<
  string,
  { start: () => void; outcome: Promise<string> }
>();

@Controller('late')
class LateWorkController {
  constructor(
    @Inject(PaymentsWriter) private readonly writer: PaymentsWriter,
  ) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(@Body() body: { key: string }): Promise<{ ok: true }> {
    let start!: () => void;
    const started = new Promise<void>((resolve) => {
      start = resolve;
    });
    // Not awaited: it runs when the test starts it, after the return.
    const outcome = started
      .then(() => this.writer.insertPayment(body.key, 5))
      .then(
        () => 'written',
        (error: Error) => error.name,
      );
    lateWrites.set(body.key, { start, outcome });
    await returning.get(body.key)?.wait();
    return { ok: true };
  }
}

describe.each(ADAPTERS.map((fixture) => [fixture.name, fixture] as const))(
  'work a handler did not await, on %s',
  (_name, fixture) => {
    let target: AdapterApp;

    beforeAll(async () => {
      target = await startAdapterApp(fixture, {
        controllers: [LateWorkController],
      });
    });
    afterAll(() => target?.close());

    it('is refused when it sends a statement while the record completes without a transaction: nothing commits apart from the record', async () => {
      const key = randomUUID();
      const handlerIn = new Barrier();
      returning.set(key, handlerIn);
      const answer = fetch(`${target.url}/late`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ key }),
      });
      // The claim is in: the test holds its row, so that the completion
      // waits for it once the handler returned.
      await handlerIn.reached();
      const held = await holdInTransaction(
        target.db.url,
        'SELECT 1 FROM idempotency_records WHERE key = $1 FOR UPDATE',
        [key],
      );
      try {
        handlerIn.open();
        await untilBlocked(target.db, 1);
        const late = lateWrites.get(key)!;
        late.start();
        expect(await late.outcome).toBe('TransactionClosedError');
      } finally {
        await held.release();
      }
      const response = await answer;
      expect({ status: response.status, body: await response.json() }).toEqual({
        status: 201,
        body: { ok: true },
      });
      expect(
        await target.db.query(
          `SELECT (SELECT status FROM idempotency_records WHERE key = $1) AS record,
                  (SELECT count(*)::int FROM payments WHERE key = $1) AS payments`,
          [key],
        ),
      ).toEqual([{ record: 'completed', payments: 0 }]);
    });
  },
);
