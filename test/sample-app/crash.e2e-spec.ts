import { FakeGateway } from '../utils/fake-gateway.js';
import { until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { lockWaiters, presenceBackend } from '../utils/sessions.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';

describe('the sample app killed between its charge and its commit', () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let app: SampleProcess | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
  });
  afterAll(async () => {
    await app?.stop();
    await gateway.stop();
    await db.drop();
  });

  const count = async (table: string) =>
    (
      await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)
    )[0].n;
  const pay = (url: string, key: string) =>
    fetch(`${url}/payments`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
      body: JSON.stringify({
        amount: 4200,
        currency: 'EUR',
        merchantId: 'm_7',
      }),
    });

  it('charges exactly once and creates exactly one payment after SIGKILL and a retry', async () => {
    const env = { DATABASE_URL: db.url, GATEWAY_URL: gateway.url };
    app = await startSample(env);
    const key = 'crash-key-1';

    // Holds the payments table, so the handler stops after its charge step,
    // inside its transaction, before it can write the payment and commit.
    const holder = await holdInTransaction(
      db.url,
      'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
    );
    const request = pay(app.url, key).catch((error: unknown) => error);
    await until(
      async () => (await count('idempotency_steps')) === 1,
      'the charge step to commit',
    );
    await until(
      async () => (await lockWaiters(db, 'payments')).length === 1,
      'the handler to wait on the payments table',
    );
    const [handler] = await lockWaiters(db, 'payments');
    // The key is claimed by the process, whose presence session tells other
    // instances (and its own next start) that it runs it.
    const [claim] = await db.query<{ status: string; instance: string }>(
      `SELECT status, owner_instance AS instance FROM idempotency_records WHERE key = $1`,
      [key],
    );
    expect(claim).toEqual({
      status: 'in_progress',
      instance: expect.any(String),
    });
    const presence = await presenceBackend(db, claim.instance);
    expect(presence).toBeDefined();
    // The charge carried the request's derived key.
    const derived = await derivedKeyOf(db, key);
    expect(gateway.calls.get(derived)).toBe(1);

    expect(await app.stop('SIGKILL')).toEqual({
      code: null,
      signal: 'SIGKILL',
    });
    // The client saw its connection die: no answer, so it will retry.
    expect(String(await request)).toMatch(/fetch failed/);
    await holder.release();
    // The server rolls the dead process's transaction back and ends its
    // sessions, the presence session with them.
    await until(
      async () =>
        (
          await db.query(
            'SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])',
            [[handler, presence!.pid]],
          )
        ).length === 0,
      "the killed process's sessions to end",
    );
    expect(await count('payments')).toBe(0);
    expect(gateway.chargeCount).toBe(1);
    // Its claim is still leased, but nobody holds it any more.
    expect(
      await db.query(
        `SELECT status, lease_expires_at > now() AS leased FROM idempotency_records WHERE key = $1`,
        [key],
      ),
    ).toEqual([{ status: 'in_progress', leased: true }]);

    // The app started again (a new instance) takes the key over at once.
    app = await startSample(env);
    const retry = await pay(app.url, key);
    expect(retry.status).toBe(201);
    const payment = (await retry.json()) as {
      chargeId: string;
      amount: number;
    };
    expect(payment).toMatchObject({ amount: 4200, chargeId: 'ch_1' });
    expect(gateway.chargeCount).toBe(1);
    // The takeover kept the key's generation: the same derived key, called once.
    expect(await derivedKeyOf(db, key)).toBe(derived);
    expect(gateway.calls.get(derived)).toBe(1);
    expect(await count('payments')).toBe(1);
    expect(await count('ledger_entries')).toBe(2);
    expect(await count('idempotency_steps')).toBe(0);
    expect(
      await db.query(`SELECT status FROM idempotency_records WHERE key = $1`, [
        key,
      ]),
    ).toEqual([{ status: 'completed' }]);
  });
});
