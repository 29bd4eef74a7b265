import { randomUUID } from 'node:crypto';
import type { SampleProcess } from '../utils/sample-process.js';
import { startSample } from '../utils/sample-process.js';
import { Barrier, until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { inProgress, UNAVAILABLE } from '../utils/problems.js';
import {
  idleInTransaction,
  lockWaiters,
  PRESENCE_APPLICATION_NAME,
  sessions,
  terminateBackend,
  untilPresenceRestored,
} from '../utils/sessions.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { HeldGateway } from './held-gateway.js';
import { countRows, pay, type PaymentAnswer } from './payments-load.js';

describe("the sample app when PostgreSQL ends a handler's connections", () => {
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
  const problemOf = (answer: PaymentAnswer) => ({
    status: answer.status,
    contentType: answer.contentType,
    retryAfter: answer.retryAfter,
    body: JSON.parse(answer.body.toString()) as unknown,
  });
  const problem = (body: unknown) => ({
    status: (body as { status: number }).status,
    contentType: expect.stringMatching(
      /^application\/problem\+json/,
    ) as unknown,
    retryAfter: '1',
    body,
  });

  it('during a statement of the handler, after its first write: a clean 503, nothing written, the retry executes once', async () => {
    held.barrier.open();
    const key = 'terminate-in-statement';
    // Holds the ledger table: the handler stops after its charge step and the
    // INSERT of its payment, inside its transaction, in the INSERT of its
    // ledger entries.
    const holder = await holdInTransaction(
      db.url,
      'LOCK TABLE ledger_entries IN ACCESS EXCLUSIVE MODE',
    );
    const charges = gateway.charges.length;
    const request = pay(app.url, key);
    let pids: number[] = [];
    await until(async () => {
      pids = await lockWaiters(db, 'ledger_entries');
      return pids.length === 1;
    }, 'the handler to wait on the ledger table');
    await terminateBackend(db, pids[0]);
    await holder.release();
    const failed = await request;

    expect(problemOf(failed)).toEqual(problem(UNAVAILABLE));
    const after = await rowsOf(key);
    // Its payment rolled back with its transaction, and its claim was
    // released; the charge step committed on a connection of its own: it
    // survives, and the released record, without an owner, keeps the key
    // bound to this request.
    expect(after).toEqual({
      payments: 0,
      ledgerEntries: 0,
      records: 1,
      steps: 1,
    });
    expect(
      await db.query(
        `SELECT status, owner, has_steps FROM idempotency_records WHERE key = $1`,
        [key],
      ),
    ).toEqual([{ status: 'in_progress', owner: null, has_steps: true }]);
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
    // One charge, under the request's derived key, whatever the calls.
    const derived = await derivedKeyOf(db, key);
    expect(gateway.charges.length).toBe(charges + 1);
    expect(gateway.chargeOf(derived)).toBe(gateway.charges[charges]);
    console.log(
      `terminate (in a statement, after a write): client got ${failed.status} ${failed.contentType} ` +
        `Retry-After ${failed.retryAfter}; after it: ${after.payments} payments, ${after.records} records, ${after.steps} step; ` +
        `retry: ${retry.status}, ${done.payments} payment, gateway calls for the key ${gateway.calls.get(derived)}`,
    );
  });

  it('while the handler waits for the gateway, holding no connection: every session of the app ended changes nothing, a duplicate gets 409, the request completes once', async () => {
    held.barrier = new Barrier();
    const key = 'terminate-while-waiting';
    const charges = gateway.charges.length;
    const request = pay(app.url, key);
    await held.barrier.reached(1);
    // The key is claimed by a committed row, leased to the instance.
    const [claim] = await db.query<{
      status: string;
      instance: string;
      leased: boolean;
    }>(
      `SELECT status, owner_instance::text AS instance,
              lease_expires_at > now() AS leased
       FROM idempotency_records WHERE key = $1`,
      [key],
    );
    expect(claim).toEqual({
      status: 'in_progress',
      instance: expect.any(String),
      leased: true,
    });
    // No session of the app sits in a transaction: the handler holds
    // nothing while it waits.
    expect(await idleInTransaction(db)).toEqual([]);

    // PostgreSQL ends every session of the app: the idle connections of its
    // pool and its presence session.
    const ended = await sessions(db);
    expect(
      ended.filter((s) => s.applicationName === PRESENCE_APPLICATION_NAME),
    ).toHaveLength(1);
    for (const { pid } of ended) {
      await terminateBackend(db, pid);
    }
    const presencePid = ended.find(
      (s) => s.applicationName === PRESENCE_APPLICATION_NAME,
    )!.pid;
    // The instance re-establishes its presence by itself.
    await untilPresenceRestored(db, claim.instance, presencePid);

    // The claim outlived the sessions: a duplicate is refused.
    const duplicate = await pay(app.url, key);
    expect(problemOf(duplicate)).toEqual(problem(inProgress(key)));

    held.barrier.open();
    const done = await request;
    expect({ status: done.status, replayed: done.replayed }).toEqual({
      status: 201,
      replayed: false,
    });
    const rows = await rowsOf(key);
    expect(rows).toEqual({
      payments: 1,
      ledgerEntries: 1,
      records: 1,
      steps: 0,
    });
    const derived = await derivedKeyOf(db, key);
    expect(gateway.charges.length).toBe(charges + 1);
    expect(gateway.chargeOf(derived)).toBe(gateway.charges[charges]);
    const replay = await pay(app.url, key);
    expect(replay.replayed).toBe(true);
    expect(replay.body.equals(done.body)).toBe(true);
    console.log(
      `terminate (waiting for the gateway): ${ended.length} sessions of the app ended (pool and presence), ` +
        `none in a transaction; duplicate ${duplicate.status}; request ${done.status}, ${rows.payments} payment, ` +
        `gateway calls for the key ${gateway.calls.get(derived)}; replay byte-identical`,
    );
  });
});
