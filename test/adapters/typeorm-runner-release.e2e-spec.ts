/**
 * TypeORM: a handler that calls `release()` on the query runner of its
 * transaction (as code written for runners of its own does) gives nothing
 * back to the pool: the module gives the connection back once the
 * transaction ended, never a connection with the transaction open on it.
 */
import { randomUUID } from 'node:crypto';
import { Body, Controller, HttpCode, Inject, Post } from '@nestjs/common';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';
import { idleInTransaction } from '../utils/sessions.js';
import { PaymentsWriter } from './adapter-fixture.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import { typeormFixture } from './typeorm.fixture.js';

/** Where `POST /released/held` waits, once it wrote. */
let held = new Barrier();

@Controller('released')
class ReleasingController {
  constructor(
    @Inject(PaymentsWriter) private readonly writer: PaymentsWriter,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async create(@Body() body: { key: string }): Promise<{ id: number }> {
    const id = await this.writer.insertPayment(body.key, 40);
    await this.idempotency.manager.queryRunner!.release();
    await this.writer.insertLedger(id, 40);
    return { id };
  }

  /** Holds its transaction open at {@link held}, once it wrote. */
  @Post('held')
  @HttpCode(201)
  @Idempotent()
  async hold(@Body() body: { key: string }): Promise<{ id: number }> {
    const id = await this.writer.insertPayment(body.key, 40);
    await held.wait();
    return { id };
  }
}

describe('a TypeORM handler that releases its query runner', () => {
  let target: AdapterApp;

  beforeAll(async () => {
    target = await startAdapterApp(typeormFixture, {
      controllers: [ReleasingController],
    });
  });
  afterAll(() => target?.close());

  const post = (key: string) =>
    fetch(`${target.url}/released`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ key }),
    });
  const rowsOf = async (key: string) =>
    target.db.query(
      `SELECT (SELECT status FROM idempotency_records WHERE key = $1) AS record,
              (SELECT count(*)::int FROM payments WHERE key = $1) AS payments,
              (SELECT count(*)::int FROM ledger_entries l
                 JOIN payments p ON p.id = l.payment_id WHERE p.key = $1) AS ledger`,
      [key],
    );

  it('commits its writes with the record once, leaves no transaction open on a pooled connection, and replays', async () => {
    const keys = [randomUUID(), randomUUID()];
    const first = await post(keys[0]);
    expect(first.status).toBe(201);
    const body = await first.json();
    expect(await idleInTransaction(target.db)).toEqual([]);
    // The next request, on whatever connection the pool hands it.
    expect((await post(keys[1])).status).toBe(201);
    const again = await post(keys[0]);
    expect({
      status: again.status,
      replayed: again.headers.get('idempotent-replayed'),
      body: await again.json(),
    }).toEqual({ status: 201, replayed: 'true', body });
    for (const key of keys) {
      expect(await rowsOf(key)).toEqual([
        { record: 'completed', payments: 1, ledger: 1 },
      ]);
    }
  });
});

describe('a TypeORM application closed while a handler holds its transaction', () => {
  it("closes once the handler ended: TypeORM's destroy() does not loop for ever on the handler's runner", async () => {
    held = new Barrier();
    const target = await startAdapterApp(typeormFixture, {
      controllers: [ReleasingController],
    });
    const key = randomUUID();
    const request = fetch(`${target.url}/released/held`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ key }),
    }).then(
      (response) => response.status,
      () => 'no answer',
    );
    await held.reached(1);
    // Without the fix, the close spins in TypeORM's closePool() and never
    // lets the event loop turn again: this test then hangs.
    const closing = target.close();
    held.open();
    await closing;
    expect([201, 503, 'no answer']).toContain(await request);
  });
});
