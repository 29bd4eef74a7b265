import type { Pool } from 'pg';
import { FakeGateway } from '../utils/fake-gateway.js';
import { PRESENCE_APPLICATION_NAME } from '../utils/sessions.js';
import { StatementFaults } from '../utils/statement-faults.js';
import { PLATFORMS, type Platform } from '../utils/test-app.js';
import {
  cellClient,
  expectNoServerError,
  expectOneCharge,
  LEFT_LEASE_MS,
  LIVE_LEASE_MS,
  type CellClient,
} from './client.js';
import { Control, type PaymentResponse } from './fault-matrix.module.js';
import {
  CELLS,
  RENEWAL_LEASE_MS,
  type Cell,
  type MatrixTarget,
  type Run,
} from './postgres-cells.js';
import { AMOUNT, label, read, type Reply } from './replies.js';

/**
 * A payments application of the matrix on one data library: `POST
 * /payments` charges the gateway in a `charge` step, then writes a payment
 * (its reference, amount and charge) and two ledger entries (`customer`,
 * `merchant`) in the handler's transaction, failing after the payment when
 * `Control` says so; `POST /payments/limited` writes a payment and answers
 * a stored 402 over the limit (fault-matrix.module.ts, adapter-matrix.ts).
 */
export interface MatrixSubject {
  /** The column of `payments` that holds the request's reference. */
  readonly reference: string;
  /**
   * Starts the application on `platform`, its claims leased for `leaseMs`
   * (no collector), charging the gateway at `gatewayUrl`.
   */
  start(
    platform: Platform,
    leaseMs: number,
    gatewayUrl: string,
  ): Promise<{ readonly target: MatrixTarget; readonly pool: Pool }>;
}

/**
 * Issue 28: the connection of each statement the module sends or relies on
 * is lost just before it and just after it, then the client retries. After
 * every answer: the payment and its ledger entries exist exactly when the
 * record is completed, and a 2xx names a payment that committed. After
 * every failed answer whose key has a committed `charge` step, and once
 * the lease of a claim such an answer left has run out: another body under
 * the key gets 422 problem+json, runs no handler, calls no gateway and
 * changes nothing (I6, the key bound to its request). After each cell: the
 * answers the cell expects (never a 500; a 409 only until the lease runs
 * out), the same bytes for every client and for a replay, one payment and
 * one charge, for the request's own amount, no step left behind. Issue 39
 * (I4): wherever the instance survives its fault and can give its claim
 * up, the retry sent right after a failed answer runs or replays, never a
 * 409, against a lease long enough that a claim left behind would still
 * hold the key. The other stores' matrix: store-matrix.ts.
 */
export function describePostgresMatrix(subject: MatrixSubject): void {
  describe.each(PLATFORMS)('the fault matrix (%s)', (platform) => {
    const renewal = (cell: Cell) => cell.point === 'renewal';
    describeCells(
      subject,
      platform,
      CELLS.filter((cell) => !renewal(cell) && !cell.claimLeft),
      LIVE_LEASE_MS,
    );
    const left = CELLS.filter((cell) => !renewal(cell) && cell.claimLeft);
    if (left.length > 0) {
      describe(`claims left behind, leased for ${LEFT_LEASE_MS} ms`, () => {
        describeCells(subject, platform, left, LEFT_LEASE_MS);
      });
    }
    describe(`claims leased for ${RENEWAL_LEASE_MS} ms`, () => {
      describeCells(subject, platform, CELLS.filter(renewal), RENEWAL_LEASE_MS);
    });
  });
}

/** `cells` on `platform`, against an application whose claims are leased for `leaseMs`. */
function describeCells(
  subject: MatrixSubject,
  platform: Platform,
  cells: readonly Cell[],
  leaseMs: number,
): void {
  let gateway: FakeGateway;
  let target: MatrixTarget;
  let faults: StatementFaults;
  let control: Control;

  beforeAll(async () => {
    gateway = await new FakeGateway().start();
    let pool: Pool;
    ({ target, pool } = await subject.start(platform, leaseMs, gateway.url));
    faults = await StatementFaults.install(pool, target.db.url, [
      PRESENCE_APPLICATION_NAME,
    ]);
    control = target.app.get(Control);
  });
  afterAll(async () => {
    await faults?.restore();
    await target?.close();
    await gateway?.stop();
  });

  /** What the database holds for `key` (the reference of its payment). */
  const state = async (key: string) => {
    const payments = await target.db.query<{
      id: number;
      amount: number;
      chargeId: string | null;
    }>(
      `SELECT id, amount, charge_id AS "chargeId" FROM payments
       WHERE ${subject.reference} = $1 ORDER BY id`,
      [key],
    );
    const ledger = await target.db.query<{ account: string; amount: number }>(
      `SELECT l.account, l.amount FROM ledger_entries l
       JOIN payments p ON p.id = l.payment_id
       WHERE p.${subject.reference} = $1 ORDER BY l.id`,
      [key],
    );
    const [record] = await target.db.query<{
      status: string;
      responseStatus: number | null;
    }>(
      `SELECT status, response_status AS "responseStatus"
       FROM idempotency_records WHERE key = $1`,
      [key],
    );
    const steps = await target.db.query(
      'SELECT 1 FROM idempotency_steps WHERE key = $1',
      [key],
    );
    return { payments, ledger, record, steps: steps.length };
  };

  /**
   * I2 after every answer: the payment and its two entries exist exactly
   * when the record is completed; a 2xx names a payment that committed.
   */
  const expectConsistent = async (client: CellClient, reply: Reply) => {
    const now = await state(client.key);
    const completed = now.record?.status === 'completed';
    if (client.limited) {
      expect({
        answer: label(reply),
        payments: now.payments.length,
        completed,
      }).toEqual({ answer: label(reply), payments: 0, completed: false });
      return;
    }
    expect({
      answer: label(reply),
      payments: now.payments.length,
      ledgerEntries: now.ledger.length,
      completed,
    }).toEqual({
      answer: label(reply),
      ...(completed
        ? { payments: 1, ledgerEntries: 2, completed: true }
        : { payments: 0, ledgerEntries: 0, completed: false }),
    });
    if (reply.status >= 200 && reply.status < 300) {
      const body = JSON.parse(reply.text) as PaymentResponse;
      expect(now.payments.map((payment) => payment.id)).toEqual([
        body.paymentId,
      ]);
    }
  };

  /**
   * The record of `key` as a probe must leave it. The lease of a claim its
   * owner holds counts by whether it is live: a renewal the owner sent
   * before its release (on a busy machine, still in flight) may move its
   * end while the probe runs; an ownerless lease counts to the microsecond.
   */
  const recordRow = async (key: string) =>
    (
      await target.db.query(
        `SELECT status, owner, fingerprint, has_steps AS "hasSteps",
                CASE WHEN owner IS NULL THEN lease_expires_at::text
                  ELSE CASE WHEN lease_expires_at > now() THEN 'live' ELSE 'lapsed' END
                END AS lease,
                expires_at::text AS expires
         FROM idempotency_records WHERE key = $1`,
        [key],
      )
    )[0] as unknown;

  const runOf = (cell: Cell): Run => {
    const client = cellClient(
      {
        platform,
        url: target.url,
        control,
        gateway,
        leaseMs,
        checkAnswer: expectConsistent,
        // Whether a `charge` step of `key` has committed.
        charged: async (key) =>
          (
            await target.db.query(
              `SELECT 1 FROM idempotency_steps WHERE key = $1 AND step = 'charge'`,
              [key],
            )
          ).length === 1,
        held: async (key) => ({
          record: await recordRow(key),
          state: await state(key),
        }),
        // A claim nobody renews lapses within its lease.
        claimEnds: async (key) => {
          const [row] = (await target.db.query(
            `SELECT (extract(epoch FROM lease_expires_at) * 1000)::float8 AS ends
             FROM idempotency_records
             WHERE key = $1 AND status = 'in_progress' AND lease_expires_at > now()`,
            [key],
          )) as Array<{ ends: number }>;
          return row?.ends ?? 0;
        },
      },
      cell,
      cell.route === 'limited',
    );
    return { ...client, leaseMs, target, faults, control };
  };

  it.each(cells)('$point / $when', async (cell) => {
    const run = runOf(cell);
    const charges = gateway.chargeCount;
    const clients = await cell.run(run);

    // No 500, and each client got what the cell expects.
    expectNoServerError(clients.flat());
    expect(clients.map((replies) => replies.map(label))).toEqual(cell.expected);
    // Every client ends with the same bytes, and so do the next requests.
    const finals = clients.map((replies) => replies[replies.length - 1]);
    const final = finals[0];
    for (const other of finals) {
      expect(other.text).toBe(final.text);
      expect(other.contentType).toBe(final.contentType);
    }
    if (cell.runsAgain) {
      const again = await read(run.send());
      expect(again).toEqual({ ...final, replayed: false });
    }
    const replay = await read(run.send());
    expect(replay).toEqual({ ...final, replayed: true });
    // The binding was probed after each failed answer with a charge.
    expect(run.probed).toEqual(cell.probed ?? []);

    const now = await state(run.key);
    expect(now.steps).toBe(0);
    if (run.limited) {
      // The rejected payment never committed; the 402 is the record.
      expect(now.payments).toEqual([]);
      expect(now.record).toEqual({ status: 'failed', responseStatus: 402 });
      expect(gateway.chargeCount).toBe(charges);
      return;
    }
    // One payment, booked twice in the ledger, for the one charge.
    const body = JSON.parse(final.text) as PaymentResponse;
    expect(now.record).toEqual({ status: 'completed', responseStatus: 201 });
    expect(now.payments).toEqual([
      { id: body.paymentId, amount: AMOUNT, chargeId: body.chargeId },
    ]);
    expect(now.ledger).toEqual([
      { account: 'customer', amount: -AMOUNT },
      { account: 'merchant', amount: AMOUNT },
    ]);
    await expectOneCharge(
      gateway,
      run.control,
      run.key,
      charges,
      cell.gatewayCalls ?? 1,
      body.chargeId,
    );
  });
}
