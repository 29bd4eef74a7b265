import type { SampleProcess } from '../utils/sample-process.js';
import { startSample } from '../utils/sample-process.js';
import { until, untilAdvisoryLocks } from '../utils/barrier.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { countRows, lockWaiters, pay } from './payments-load.js';

/** Requests in flight when the instance is killed. */
const IN_FLIGHT = 20;
/**
 * All of them are inside the handler, in their transactions: the instance's
 * pool has one connection more, which the module keeps free for the commits
 * of steps.
 */
const IN_HANDLER = IN_FLIGHT;
const POOL_SIZE = IN_HANDLER + 1;

describe('an instance of the sample app killed with requests inside the handler', () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let victim: SampleProcess | undefined;
  let survivor: Promise<SampleProcess> | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
  });
  afterAll(async () => {
    await victim?.stop();
    await survivor?.then(
      (instance) => instance.stop(),
      () => undefined,
    );
    await gateway?.stop();
    await db?.drop();
  });

  it(`leaves no payment and no stuck key: each of the ${IN_FLIGHT} retries executes once, at once`, async () => {
    const env = {
      DATABASE_URL: db.url,
      GATEWAY_URL: gateway.url,
      DATABASE_POOL_SIZE: String(POOL_SIZE),
    };
    victim = await startSample(env);
    // Another instance takes the retries; it starts while the first is
    // killed (the first ran the migrations).
    survivor = startSample(env);
    const keys = Array.from({ length: IN_FLIGHT }, (_, i) => `crash-${i}`);
    // Holds the payments table: each handler stops after its charge step,
    // inside its transaction, in the INSERT of its payment.
    const holder = await holdInTransaction(
      db.url,
      'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
    );
    const killed = keys.map((key) =>
      pay(victim!.url, key).catch((error: unknown) => error),
    );
    await until(
      async () => (await lockWaiters(db, 'payments')).length === IN_HANDLER,
      `${IN_HANDLER} handlers to wait on the payments table`,
    );
    const charged = await countRows(db, 'SELECT 1 FROM idempotency_steps');
    expect(charged).toBe(IN_HANDLER);

    expect(await victim.stop('SIGKILL')).toEqual({
      code: null,
      signal: 'SIGKILL',
    });
    // No client got an answer: each will retry.
    const outcomes = await Promise.all(killed);
    expect(outcomes.map((outcome) => String(outcome))).toEqual(
      keys.map(() => expect.stringMatching(/fetch failed/)),
    );
    await holder.release();
    // The server rolls the dead sessions back, which frees their keys.
    await untilAdvisoryLocks(db, 'held', 0);
    const afterKill = {
      payments: await countRows(db, 'SELECT 1 FROM payments'),
      ledgerEntries: await countRows(db, 'SELECT 1 FROM ledger_entries'),
      records: await countRows(db, 'SELECT 1 FROM idempotency_records'),
      steps: await countRows(db, 'SELECT 1 FROM idempotency_steps'),
    };
    expect(afterKill).toEqual({
      payments: 0,
      ledgerEntries: 0,
      records: 0,
      steps: IN_HANDLER,
    });
    expect(gateway.chargeCount).toBe(IN_HANDLER);

    const { url } = await survivor;
    const retries = await Promise.all(keys.map((key) => pay(url, key)));
    // At once: no 409 from a key still held by the dead instance.
    expect(
      retries.map(({ key, status, replayed }) => ({ key, status, replayed })),
    ).toEqual(keys.map((key) => ({ key, status: 201, replayed: false })));
    for (const key of keys) {
      expect({
        key,
        payments: await countRows(
          db,
          'SELECT 1 FROM payments WHERE merchant_id = $1',
          [`m_${key}`],
        ),
        charges: gateway.calls.get(`${key}:charge`),
      }).toEqual({ key, payments: 1, charges: 1 });
    }
    const duplicates = await Promise.all(keys.map((key) => pay(url, key)));
    duplicates.forEach((duplicate, i) => {
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body.equals(retries[i].body)).toBe(true);
    });
    const final = {
      payments: await countRows(db, 'SELECT 1 FROM payments'),
      ledgerEntries: await countRows(db, 'SELECT 1 FROM ledger_entries'),
      records: await countRows(
        db,
        `SELECT 1 FROM idempotency_records WHERE status = 'completed'`,
      ),
      steps: await countRows(db, 'SELECT 1 FROM idempotency_steps'),
      charges: gateway.chargeCount,
    };
    expect(final).toEqual({
      payments: IN_FLIGHT,
      ledgerEntries: 2 * IN_FLIGHT,
      records: IN_FLIGHT,
      steps: 0,
      charges: IN_FLIGHT,
    });
    console.log(
      `crash: ${IN_FLIGHT} requests in flight, ${IN_HANDLER} inside the handler (charged) at SIGKILL; ` +
        `${outcomes.length} fetches failed; after the kill ${afterKill.payments} payments, ${afterKill.records} records, ${afterKill.steps} steps kept; ` +
        `retries ${retries.filter((retry) => retry.status === 201 && !retry.replayed).length} × 201 (none 409); ` +
        `${final.payments} payments, ${final.ledgerEntries} ledger entries, ${final.charges} gateway charges ` +
        `(${IN_HANDLER} reused from steps); ${duplicates.filter((d) => d.replayed).length} byte-identical replays`,
    );
  });
});
