import { randomUUID } from 'node:crypto';
import type { SampleProcess } from '../utils/sample-process.js';
import { startSample } from '../utils/sample-process.js';
import { Barrier, until, untilAdvisoryLocks } from '../utils/barrier.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { HeldGateway } from './held-gateway.js';
import {
  countRows,
  lockWaiters,
  pay,
  type PaymentAnswer,
} from './payments-load.js';

describe("the sample app when PostgreSQL ends a handler's connection", () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let held: HeldGateway;
  let app: SampleProcess;

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
    held = await new HeldGateway(gateway).start();
    app = await startSample({ DATABASE_URL: db.url, GATEWAY_URL: held.url });
  });
  afterAll(async () => {
    await app?.stop();
    await held?.stop();
    await gateway?.stop();
    await db?.drop();
  });

  const rowsOf = async (key: string) => ({
    payments: await countRows(
      db,
      'SELECT 1 FROM payments WHERE merchant_id = $1',
      [`m_${key}`],
    ),
    ledgerEntries: await countRows(
      db,
      `SELECT 1 FROM ledger_entries WHERE account = $1`,
      [`merchant:m_${key}`],
    ),
    records: await countRows(
      db,
      'SELECT 1 FROM idempotency_records WHERE key = $1',
      [key],
    ),
    steps: await countRows(
      db,
      'SELECT 1 FROM idempotency_steps WHERE key = $1',
      [key],
    ),
  });
  const terminate = async (pid: number) => {
    expect(
      await db.query('SELECT pg_terminate_backend($1) AS ended', [pid]),
    ).toEqual([{ ended: true }]);
    await until(
      async () =>
        (await countRows(db, 'SELECT 1 FROM pg_stat_activity WHERE pid = $1', [
          pid,
        ])) === 0,
      `backend ${pid} to end`,
    );
  };

  /**
   * What the client got, what the database holds, and that a retry then
   * executes once, reusing the charge of the failed attempt.
   */
  const expectCleanFailureAndRetry = async (
    key: string,
    failed: PaymentAnswer,
    scenario: string,
  ) => {
    const problem = failed.body.toString();
    let type: unknown = problem;
    try {
      type = (JSON.parse(problem) as { type?: unknown }).type;
    } catch {
      // Not JSON: printed as it came.
    }
    const after = await rowsOf(key);
    // The charge step committed on a connection of its own: it survives.
    expect(after).toEqual({
      payments: 0,
      ledgerEntries: 0,
      records: 0,
      steps: 1,
    });
    // The process is healthy: it still reads, and the retry goes through.
    expect((await fetch(`${app.url}/payments/${randomUUID()}`)).status).toBe(
      404,
    );
    const retry = await pay(app.url, key);
    expect({ status: retry.status, replayed: retry.replayed }).toEqual({
      status: 201,
      replayed: false,
    });
    const done = await rowsOf(key);
    expect(done).toEqual({
      payments: 1,
      ledgerEntries: 1,
      records: 1,
      steps: 0,
    });
    expect(gateway.calls.get(`${key}:charge`)).toBe(1);
    console.log(
      `terminate (${scenario}): client got ${failed.status} ${failed.contentType} ` +
        `${String(type)} Retry-After ${failed.retryAfter}; ` +
        `after it: ${after.payments} payments, ${after.records} records, ${after.steps} step; ` +
        `retry: ${retry.status}, ${done.payments} payment, gateway calls for the key ${gateway.calls.get(`${key}:charge`)}`,
    );
    expect(failed.status).toBe(503);
    expect(failed.contentType).toMatch(/^application\/problem\+json/);
    expect(failed.retryAfter).toBe('1');
    expect(JSON.parse(problem)).toMatchObject({
      type: 'urn:idempotency:unavailable',
      status: 503,
    });
  };

  it('during a statement of the handler: a clean 503, nothing written, the retry executes once', async () => {
    held.barrier.open();
    const key = 'terminate-in-statement';
    // Holds the payments table: the handler stops after its charge step, in
    // the INSERT of the payment.
    const holder = await holdInTransaction(
      db.url,
      'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
    );
    const request = pay(app.url, key);
    let pids: number[] = [];
    await until(async () => {
      pids = await lockWaiters(db, 'payments');
      return pids.length === 1;
    }, 'the handler to wait on the payments table');
    await terminate(pids[0]);
    await holder.release();
    const failed = await request;
    await untilAdvisoryLocks(db, 'held', 0);
    await expectCleanFailureAndRetry(key, failed, 'in a statement');
  });

  it('while the handler waits for the gateway, idle in its transaction: a clean 503, nothing written, the retry executes once', async () => {
    held.barrier = new Barrier();
    const key = 'terminate-while-idle';
    const request = pay(app.url, key);
    await held.barrier.reached(1);
    // The handler's transaction holds the advisory locks of its key.
    const [{ pid }] = await db.query<{ pid: number }>(
      `SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    await terminate(pid);
    held.barrier.open();
    const failed = await request;
    await expectCleanFailureAndRetry(key, failed, 'idle in transaction');
  });
});
