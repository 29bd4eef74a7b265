import pg from 'pg';
import { startEmbeddedPostgres } from '../setup/embedded-postgres.js';
import {
  startSample,
  TUNED_SAMPLE,
  type SampleProcess,
} from '../utils/sample-process.js';
import { until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { lockWaiters } from '../utils/sessions.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { holdInTransaction } from '../utils/test-database.js';
import {
  HoldingGateway,
  PaymentLoad,
  paymentFor,
  postPayment,
  type LoadAttempt,
  type PaymentAttempt,
} from './outage-load.js';

type EmbeddedServer = Awaited<ReturnType<typeof startEmbeddedPostgres>>;

/** What the scenario measured, printed on one line. */
interface OutageCounts {
  requests: number;
  ok: number;
  /** Answers with a 5xx status, by status. */
  errors: Record<number, number>;
  transportErrors: number;
  /** The client saw a failure, yet the payment had committed. */
  inDoubt: number;
  /**
   * Failed attempts whose claim outlived them: its release could not reach
   * the server, so the key waited for its lease to run out.
   */
  orphanedClaims: number;
  retriesExecuted: number;
  retriesReplayed: number;
  payments: number;
  charges: number;
  /** Keys whose charge call reached the gateway more than once (one charge). */
  repeatedChargeCalls: number;
}

/**
 * The instance's `lease`: a claim whose release failed while the server was
 * down frees its key when it runs out.
 */
const LEASE_MS = 3_000;

const isOk = (attempt: PaymentAttempt) =>
  attempt.outcome === 'answered' &&
  attempt.status! >= 200 &&
  attempt.status! < 300;

describe('a database outage under a load of unique-key payments', () => {
  let server: EmbeddedServer;
  let dbUrl: string;
  let db: pg.Pool;
  let fake: FakeGateway;
  let gateway: HoldingGateway;
  let app: SampleProcess | undefined;

  beforeAll(async () => {
    // A server of its own, whatever DATABASE_URL says: the test takes it down.
    server = await startEmbeddedPostgres();
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('CREATE DATABASE outage');
    await admin.end();
    const url = new URL(server.url);
    url.pathname = '/outage';
    dbUrl = url.href;
    db = new pg.Pool({ connectionString: dbUrl, max: 2 });
    // Its idle connections die with the server; it opens new ones after.
    db.on('error', () => undefined);
    fake = await new FakeGateway().start();
    gateway = await new HoldingGateway(fake).start();
    app = await startSample(
      {
        DATABASE_URL: dbUrl,
        GATEWAY_URL: gateway.url,
        SAMPLE_LEASE: `${LEASE_MS}ms`,
      },
      TUNED_SAMPLE,
    );
  });
  afterAll(async () => {
    await app?.stop();
    await gateway?.stop();
    await fake?.stop();
    await db?.end();
    await server?.stop();
  });

  const query = async <T>(sql: string, params: unknown[] = []) =>
    (await db.query(sql, params)).rows as T[];
  const paymentsOf = async (key: string) =>
    query<{ id: string; charge_id: string | null; entries: number }>(
      `SELECT p.id, p.charge_id,
         (SELECT count(*)::int FROM ledger_entries l WHERE l.payment_id = p.id) AS entries
       FROM payments p WHERE p.merchant_id = $1`,
      [`m_${key}`],
    );

  /**
   * Checks one answer that is not a success: the module's 503 problem, which
   * tells the client to retry with the same key.
   */
  const expectRetryable = (attempt: PaymentAttempt) => {
    if (attempt.outcome === 'transport') {
      return;
    }
    expect({
      key: attempt.key,
      outcome: attempt.outcome,
      status: attempt.status,
      contentType: attempt.contentType,
      retryAfter: attempt.retryAfter,
      body: attempt.body && JSON.parse(attempt.body.toString()),
    }).toEqual({
      key: attempt.key,
      outcome: 'answered',
      status: 503,
      contentType: expect.stringMatching(/^application\/problem\+json/),
      retryAfter: '1',
      body: expect.objectContaining({
        type: 'urn:idempotency:unavailable',
        status: 503,
      }),
    });
  };

  // Fast: the server ends every session, and requests waiting in their own
  // transaction (for the payments table) get its error. Immediate: sessions
  // die without a word, and requests waiting on the connection of their step
  // (for the steps table), before their transaction begins, see it break.
  it.each([
    { mode: 'fast', table: 'payments' },
    { mode: 'immediate', table: 'idempotency_steps' },
  ] as const)(
    'loses no payment and makes none twice when the server goes down ($mode shutdown, requests waiting for $table) and comes back',
    async ({ mode, table }) => {
      const url = app!.url;
      const prefix = `${mode}-`;
      const chargesBefore = fake.chargeCount;

      // One request waits for the gateway, its charge held there, while the
      // server goes down and comes back: its key claimed, it holds no
      // connection and no transaction. Its charge carries the key it
      // derives from its record: the steps table is locked until the
      // gateway holds that key, so that its step (which reads the table
      // first) calls the gateway after.
      const heldKey = `${prefix}held`;
      const steps = await holdInTransaction(
        dbUrl,
        'LOCK TABLE idempotency_steps IN ACCESS EXCLUSIVE MODE',
      );
      const held = postPayment(url, heldKey, 30_000);
      await until(
        async () =>
          (
            await query(
              `SELECT 1 FROM idempotency_records WHERE key = $1 AND status = 'in_progress'`,
              [heldKey],
            )
          ).length === 1,
        'the held request to claim its key',
      );
      const heldCharge = gateway.hold(await derivedKeyOf({ query }, heldKey));
      await steps.release();
      await heldCharge;
      expect(
        await query(`SELECT status FROM idempotency_records WHERE key = $1`, [
          heldKey,
        ]),
      ).toEqual([{ status: 'in_progress' }]);

      const load = new PaymentLoad(url, prefix).start();
      await load.until(
        (all) => all.filter(isOk).length >= 20,
        '20 payments before the outage',
      );
      // And some are inside a statement when it does: their writes to
      // `table` wait (reads go on).
      const locker = await holdInTransaction(
        dbUrl,
        `LOCK TABLE ${table} IN SHARE MODE`,
      );
      await until(
        async () => (await lockWaiters({ query }, table)).length >= 2,
        `requests to wait for ${table}`,
      );

      load.phase = 'down';
      await server.shutdown(mode);
      await locker.release();
      await load.until(
        (all) => all.filter((a) => a.sentIn === 'down').length >= 8,
        'requests sent while the server is down',
      );
      await server.restart();
      load.phase = 'up';
      // The app reconnects by itself: new requests succeed again.
      await load.until(
        (all) => all.filter((a) => a.sentIn === 'up' && isOk(a)).length >= 10,
        'payments after the restart',
      );
      gateway.release();
      const heldAttempt: LoadAttempt = { ...(await held), sentIn: 'held' };
      const attempts = [...(await load.stop()), heldAttempt];
      // The app lived through it.
      expect(app!.process.exitCode).toBeNull();
      expect(app!.process.signalCode).toBeNull();

      // No request is reported successful without its row; every failure is
      // the module's 503, and left nothing behind unless its commit happened
      // (a commit in doubt: then its record is there to replay).
      const counts: OutageCounts = {
        requests: attempts.length,
        ok: 0,
        errors: {},
        transportErrors: 0,
        inDoubt: 0,
        orphanedClaims: 0,
        retriesExecuted: 0,
        retriesReplayed: 0,
        payments: 0,
        charges: 0,
        repeatedChargeCalls: 0,
      };
      const inDoubt = new Set<string>();
      for (const attempt of attempts) {
        expect({ key: attempt.key, outcome: attempt.outcome }).not.toEqual({
          key: attempt.key,
          outcome: 'hang',
        });
        const rows = await paymentsOf(attempt.key);
        if (isOk(attempt)) {
          counts.ok += 1;
          expect(attempt.status).toBe(201);
          const payment = JSON.parse(attempt.body!.toString()) as {
            id: string;
            amount: number;
          };
          expect(payment.amount).toBe(paymentFor(attempt.key).amount);
          expect(rows).toEqual([
            expect.objectContaining({ id: payment.id, entries: 2 }),
          ]);
          continue;
        }
        expectRetryable(attempt);
        if (attempt.outcome === 'transport') {
          counts.transportErrors += 1;
        } else {
          counts.errors[attempt.status!] =
            (counts.errors[attempt.status!] ?? 0) + 1;
        }
        expect(rows.length).toBeLessThanOrEqual(1);
        if (rows.length === 1) {
          // Never a payment without its record: this one replays.
          inDoubt.add(attempt.key);
          expect({
            key: attempt.key,
            records: await query(
              `SELECT status FROM idempotency_records WHERE key = $1`,
              [attempt.key],
            ),
          }).toEqual({ key: attempt.key, records: [{ status: 'completed' }] });
        }
      }
      counts.inDoubt = inDoubt.size;
      // The outage was seen; the request that waited for the gateway through
      // it lost nothing: it held nothing on the server.
      expect(counts.errors[503]).toBeGreaterThan(0);
      expect(heldAttempt.status).toBe(201);
      expect(await paymentsOf(heldKey)).toEqual([
        expect.objectContaining({ entries: 2 }),
      ]);

      // A failed attempt releases its claim; one whose release could not
      // reach the server leaves it, leased for at most LEASE_MS, and never
      // behind a success.
      const orphans = await query<{ key: string; leased_ms: number }>(
        `SELECT key,
           (extract(epoch FROM lease_expires_at - now()) * 1000)::float8 AS leased_ms
         FROM idempotency_records
         WHERE status = 'in_progress' AND key = ANY($1) ORDER BY key`,
        [attempts.map((attempt) => attempt.key)],
      );
      counts.orphanedClaims = orphans.length;
      for (const orphan of orphans) {
        const attempt = attempts.find((a) => a.key === orphan.key);
        expect({ key: orphan.key, failed: attempt && !isOk(attempt) }).toEqual({
          key: orphan.key,
          failed: true,
        });
        expect(orphan.leased_ms).toBeLessThanOrEqual(LEASE_MS);
      }
      // Their keys are free once their leases have run out.
      await until(
        async () =>
          (
            await query(
              `SELECT 1 FROM idempotency_records
               WHERE status = 'in_progress' AND lease_expires_at > now()`,
            )
          ).length === 0,
        'the leases of orphaned claims to run out',
      );

      // Every key, retried with the same request once the server is back:
      // a success replays byte for byte; a failure executes now, once, or
      // replays the commit in doubt. No key is stuck (no 409).
      for (const attempt of attempts) {
        const retry = await postPayment(url, attempt.key);
        expect({ key: attempt.key, status: retry.status }).toEqual({
          key: attempt.key,
          status: 201,
        });
        if (isOk(attempt)) {
          expect(retry.replayed).toBe(true);
          expect(retry.contentType).toBe(attempt.contentType);
          expect(retry.body!.equals(attempt.body!)).toBe(true);
        } else {
          expect(retry.replayed).toBe(inDoubt.has(attempt.key));
          if (retry.replayed) {
            counts.retriesReplayed += 1;
          } else {
            counts.retriesExecuted += 1;
          }
        }
        const rows = await paymentsOf(attempt.key);
        expect(rows).toEqual([
          {
            id: (JSON.parse(retry.body!.toString()) as { id: string }).id,
            charge_id: expect.any(String),
            entries: 2,
          },
        ]);
        const derived = await derivedKeyOf({ query }, attempt.key);
        if ((fake.calls.get(derived) ?? 0) > 1) {
          counts.repeatedChargeCalls += 1;
        }
      }

      // Exactly one payment, one charge and one completed record per key,
      // no step left behind.
      const keys = attempts.map((attempt) => attempt.key);
      const [totals] = await query<{
        payments: number;
        charges: number;
        records: number;
        steps: number;
      }>(
        `SELECT
           (SELECT count(*)::int FROM payments WHERE merchant_id = ANY($1)) AS payments,
           (SELECT count(DISTINCT charge_id)::int FROM payments WHERE merchant_id = ANY($1)) AS charges,
           (SELECT count(*)::int FROM idempotency_records WHERE key = ANY($2) AND status = 'completed') AS records,
           (SELECT count(*)::int FROM idempotency_steps WHERE key = ANY($2)) AS steps`,
        [keys.map((key) => `m_${key}`), keys],
      );
      counts.payments = totals.payments;
      counts.charges = fake.chargeCount - chargesBefore;
      expect(totals).toEqual({
        payments: keys.length,
        charges: keys.length,
        records: keys.length,
        steps: 0,
      });
      expect(counts.charges).toBe(keys.length);
      expect(counts.retriesExecuted + counts.retriesReplayed).toBe(
        counts.requests - counts.ok,
      );

      const errors = Object.entries(counts.errors)
        .map(([status, n]) => `${n} × ${status}`)
        .join(', ');
      console.log(
        `${mode} shutdown: ${counts.requests} requests: ${counts.ok} × 2xx, ${errors || 'no 5xx'}, ` +
          `${counts.transportErrors} transport errors, ${counts.inDoubt} commits in doubt, ` +
          `${counts.orphanedClaims} claims left to their lease; ` +
          `retries: ${counts.retriesExecuted} executed, ${counts.retriesReplayed} replayed; ` +
          `${counts.payments} payments, ${counts.charges} gateway charges ` +
          `(${counts.repeatedChargeCalls} keys called the gateway again, charged once by their derived key)`,
      );
    },
  );
});
