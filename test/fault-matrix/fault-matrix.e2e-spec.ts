import { IdempotencyStore } from '../../src/index.js';
import { idempotencyMigrations } from '../../migrations/index.js';
import { until } from '../utils/barrier.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  PRESENCE_APPLICATION_NAME,
  presenceSessions,
  terminateBackend,
} from '../utils/sessions.js';
import {
  StatementFaults,
  type FaultTiming,
  type Statement,
} from '../utils/statement-faults.js';
import {
  PLATFORMS,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import {
  cellClient,
  expectNoServerError,
  expectOneCharge,
  LIVE_LEASE_MS,
  type CellClient,
} from './client.js';
import { CreatePayments1764000000100 } from './create-payments.migration.js';
import {
  Control,
  faultMatrixModule,
  type PaymentResponse,
} from './fault-matrix.module.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { renewalLost } from './renewal-lost.js';
import { Payment } from './payment.entity.js';
import { AMOUNT, label, LEASE_OVER, read, type Reply } from './replies.js';

/**
 * The lease of the claims of the cells whose fault leaves a claim behind
 * (`claimLeft`): short, so that it frees its key soon. The other cells
 * lease for {@link LIVE_LEASE_MS}: a claim left behind shows as a 409.
 */
const LEASE_MS = 1_000;

/**
 * The lease of the renewal cells. They check a duplicate against a lease
 * a renewal just moved: a pause of the machine longer than the lease
 * between the two (renewals come every third of it) would end it and let
 * the duplicate take over, which is another cell's fault, not this one's.
 */
const RENEWAL_LEASE_MS = 3_000;

/** One request of a cell, and what the cell can do with it. */
interface Run extends CellClient {
  /** The lease of the application's claims (ms). */
  readonly leaseMs: number;
  readonly target: TestApp;
  readonly faults: StatementFaults;
  readonly control: Control;
}

/** A point of the matrix. */
interface Cell {
  readonly point: string;
  /** `in reply`: the server's error for the session's end answers the statement. */
  readonly when: 'before' | 'after' | 'in reply';
  readonly route?: 'limited';
  /**
   * Whether the fault leaves the claim to its lease (see `ClientCell`);
   * otherwise the retry after a failed answer runs or replays at once.
   */
  readonly claimLeft?: boolean;
  /** The answers each client gets, in order. */
  readonly expected: readonly (readonly string[])[];
  /** Calls the gateway gets for the request's derived key (1 unless told). */
  readonly gatewayCalls?: number;
  /**
   * Whether the client's answer was never stored: the next request runs
   * the handler again (and stores it), the one after replays.
   */
  readonly runsAgain?: boolean;
  /**
   * The answers of the cell's clients after which a `charge` step of the
   * key had committed while the request had not (none unless told): after
   * each, another body under the key gets 422 (see `cellClient`).
   */
  readonly probed?: readonly string[];
  /** Drives the request through the fault; the answers of each client. */
  run(run: Run): Promise<Reply[][]>;
}

/** A statement of the module's own, by its function and the request's key. */
const fn =
  (name: string, check: (values: readonly unknown[]) => boolean = () => true) =>
  (run: Run) =>
  (statement: Statement) =>
    statement.text.includes(`${name}(`) &&
    statement.values[1] === run.key &&
    check(statement.values);
const claim = fn('idempotency_acquire_generation');
const readStep = (run: Run) => (statement: Statement) =>
  statement.text.includes('SELECT result FROM "idempotency_steps"') &&
  statement.values[1] === run.key;
const saveStep = fn('idempotency_save_step');
const completion = fn('idempotency_finish', (v) => v[3] === 'completed');
const storedError = fn('idempotency_finish', (v) => v[3] === 'failed');
const release = fn('idempotency_release');
const renewal = (run: Run) => (statement: Statement) =>
  statement.text.includes('idempotency_renew(') &&
  Array.isArray(statement.values[1]) &&
  statement.values[1].includes(run.key);
// Only the cell's request runs while its fault is armed.
const begin = () => (statement: Statement) =>
  statement.text.startsWith('START TRANSACTION');
const commit = () => (statement: Statement) => statement.text === 'COMMIT';
const paymentWrite = (run: Run) => (statement: Statement) =>
  statement.text.startsWith('INSERT INTO "payments"') &&
  statement.values.includes(run.key);
const ledgerWrite = (account: string) => () => (statement: Statement) =>
  statement.text.startsWith('INSERT INTO "ledger_entries"') &&
  statement.values.includes(account);

/**
 * A cell whose session ends at a statement: the request, then its retries.
 * `before` a statement of the handler's transaction that follows another
 * one is the connection lost once the previous one answered (`after-reply`
 * on it): ending it as the statement is sent would be the same as losing
 * that statement's reply, since the transaction rolls back either way.
 */
function statementCell(
  point: string,
  when: Cell['when'],
  at: (run: Run) => (statement: Statement) => boolean,
  timing: FaultTiming,
  expected: readonly string[],
  options: Partial<
    Pick<Cell, 'route' | 'gatewayCalls' | 'runsAgain' | 'probed' | 'claimLeft'>
  > & {
    prepare?: (run: Run) => void;
  } = {},
): Cell {
  const { prepare, ...rest } = options;
  return {
    point,
    when,
    expected: [expected],
    ...rest,
    async run(run) {
      prepare?.(run);
      const fault = run.faults.arm({ matches: at(run), timing });
      try {
        const replies = await run.settle(run.send());
        expect(fault.hit).toBe(true);
        await fault.injected;
        return [replies];
      } finally {
        fault.disarm();
      }
    },
  };
}

/**
 * The renewal's session ends while the handler waits (after its charge,
 * holding no connection): a later renewal keeps the lease (`renewalLost`).
 */
function renewalCell(when: 'before' | 'after'): Cell {
  return {
    point: 'renewal',
    when,
    expected: [['201']],
    run: async (run) => [
      await renewalLost(run, {
        control: run.control,
        leaseMs: run.leaseMs,
        arm: () => run.faults.arm({ matches: renewal(run), timing: when }),
        leaseEnds: async () =>
          (
            await run.target.db.query<{ ends: number }>(
              `SELECT (extract(epoch FROM lease_expires_at) * 1000)::float8 AS ends
               FROM idempotency_records WHERE key = $1`,
              [run.key],
            )
          )[0].ends,
      }),
    ],
  };
}

/**
 * The presence session ends: before the claim (it is written without the
 * instance, and only its lease protects it), or while the request runs
 * (its instance looks gone: a duplicate takes the key over at once, and
 * the fence refuses the first attempt's completion). The session's return
 * is held meanwhile.
 */
function presenceCell(when: 'before' | 'after'): Cell {
  return {
    point: 'presence',
    when,
    expected:
      when === 'before' ? [['201']] : [['503', '201 replayed'], ['201']],
    async run(run) {
      const { db } = run.target;
      const [presence] = await presenceSessions(db);
      if (presence === undefined) {
        throw new Error('The application has no presence session');
      }
      const restoring = run.faults.hold(
        (statement) =>
          statement.applicationName === PRESENCE_APPLICATION_NAME &&
          statement.text.includes('pg_try_advisory_lock'),
      );
      const held = run.control.holdAfterCharge(run.key);
      const owner = async () =>
        (
          await db.query<{ instance: string | null }>(
            `SELECT owner_instance AS instance FROM idempotency_records WHERE key = $1`,
            [run.key],
          )
        )[0].instance;
      try {
        if (when === 'before') {
          await terminateBackend(db, presence);
          // The instance is trying to come back: it knows its session is gone.
          await restoring.reached();
          const first = run.send();
          await held.reached();
          expect(await owner()).toBeNull();
          // Its lease alone keeps the key.
          expect(label(await read(run.send()))).toBe('409');
          held.open();
          return [await run.settle(first)];
        }
        const first = run.send();
        await held.reached();
        expect(await owner()).not.toBeNull();
        await terminateBackend(db, presence);
        const duplicate = await run.settle(run.send());
        held.open();
        return [await run.settle(first), duplicate];
      } finally {
        held.open();
        restoring.release();
        await untilPresenceBack(run, presence);
      }
    },
  };
}

/** Waits until the application holds its presence again, on a new session. */
async function untilPresenceBack(run: Run, previous: number): Promise<void> {
  const store = run.target.app.get<IdempotencyStore>(IdempotencyStore);
  await until(
    async () =>
      store.watching &&
      (
        await run.target.db.query(
          `SELECT 1 FROM pg_stat_activity
           WHERE datname = current_database() AND application_name = $1
             AND pid <> $2 AND state = 'idle' AND query LIKE 'LISTEN %'`,
          [PRESENCE_APPLICATION_NAME, previous],
        )
      ).length === 1,
    'the presence session to come back',
  );
}

const CELLS: readonly Cell[] = [
  statementCell('claim', 'before', claim, 'before', ['503', '201']),
  // The claim committed: the key is held until its lease runs out.
  statementCell('claim', 'after', claim, 'after', ['503', '409', '201'], {
    claimLeft: true,
  }),
  statementCell('step read', 'before', readStep, 'before', ['503', '201']),
  statementCell('step read', 'after', readStep, 'after', ['503', '201']),
  // The gateway charged, its result was not saved: the retry charges again
  // under the same derived key, which the gateway answers with the charge.
  statementCell('step save', 'before', saveStep, 'before', ['503', '201'], {
    gatewayCalls: 2,
  }),
  // From here on, the charge step committed before the attempt failed:
  // another body under the key is refused after each failed answer.
  ...(
    [
      ['step save', 'after', saveStep, 'after'],
      ['transaction begin', 'before', begin, 'before'],
      ['transaction begin', 'after', begin, 'after'],
      ['first write', 'before', begin, 'after-reply'],
      ['first write', 'after', paymentWrite, 'after'],
      ['last write', 'before', ledgerWrite('customer'), 'after-reply'],
      ['last write', 'after', ledgerWrite('merchant'), 'after'],
      // The handler returns unaware that its writes are gone.
      ['completion', 'before', ledgerWrite('merchant'), 'after-reply'],
      ['completion', 'after', completion, 'after'],
      ['completion', 'in reply', completion, 'in-reply'],
      ['commit', 'before', completion, 'after-reply'],
      // The COMMIT's answer is the session's end, before the driver sees
      // its socket close: the connection must not serve the release.
      ['commit', 'in reply', commit, 'in-reply'],
    ] as const
  ).map(([point, when, at, timing]) =>
    statementCell(point, when, at, timing, ['503', '201'], {
      probed: ['503'],
    }),
  ),
  // Committed, the answer lost: the retry replays it (the steps went with
  // the completion).
  statementCell('commit', 'after', commit, 'after', ['503', '201 replayed']),
  // The handler fails after its first write; its claim stays until its lease runs out.
  statementCell(
    'release',
    'before',
    release,
    'before',
    ['503 handler', '409', '201'],
    {
      prepare: (run) => run.control.failOnce(run.key),
      probed: ['503 handler', '409', LEASE_OVER],
      claimLeft: true,
    },
  ),
  statementCell('release', 'after', release, 'after', ['503 handler', '201'], {
    prepare: (run) => run.control.failOnce(run.key),
    probed: ['503 handler'],
  }),
  // The 402 reaches the client unstored: the next request runs again.
  statementCell('stored error', 'before', storedError, 'before', ['402'], {
    route: 'limited',
    runsAgain: true,
  }),
  statementCell('stored error', 'after', storedError, 'after', ['402'], {
    route: 'limited',
  }),
  renewalCell('before'),
  renewalCell('after'),
  presenceCell('before'),
  presenceCell('after'),
];

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
describe.each(PLATFORMS)('the fault matrix (%s)', (platform) => {
  const renewal = (cell: Cell) => cell.point === 'renewal';
  describeCells(
    platform,
    CELLS.filter((cell) => !renewal(cell) && !cell.claimLeft),
    LIVE_LEASE_MS,
  );
  describe(`claims left behind, leased for ${LEASE_MS} ms`, () => {
    describeCells(
      platform,
      CELLS.filter((cell) => cell.claimLeft),
      LEASE_MS,
    );
  });
  describe(`claims leased for ${RENEWAL_LEASE_MS} ms`, () => {
    describeCells(platform, CELLS.filter(renewal), RENEWAL_LEASE_MS);
  });
});

/** `cells` on `platform`, against an application whose claims are leased for `leaseMs`. */
function describeCells(
  platform: Platform,
  cells: readonly Cell[],
  leaseMs: number,
): void {
  let gateway: FakeGateway;
  let target: TestApp;
  let faults: StatementFaults;
  let control: Control;

  beforeAll(async () => {
    gateway = await new FakeGateway().start();
    target = await startTestApp({
      platform,
      imports: [faultMatrixModule(gateway.url)],
      typeorm: {
        entities: [Payment, LedgerEntry],
        migrations: [...idempotencyMigrations, CreatePayments1764000000100],
      },
      idempotency: { gc: false, lease: `${leaseMs}ms` },
    });
    faults = await StatementFaults.install(target.dataSource, target.db.url, [
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
       WHERE reference = $1 ORDER BY id`,
      [key],
    );
    const ledger = await target.db.query<{ account: string; amount: number }>(
      `SELECT l.account, l.amount FROM ledger_entries l
       JOIN payments p ON p.id = l.payment_id
       WHERE p.reference = $1 ORDER BY l.id`,
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

  /** The record of `key` as a probe must leave it. */
  const recordRow = async (key: string) =>
    (
      await target.db.query(
        `SELECT status, owner, fingerprint, has_steps AS "hasSteps",
                lease_expires_at::text AS lease, expires_at::text AS expires
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
        claimed: async (key) =>
          (
            await target.db.query(
              `SELECT 1 FROM idempotency_records
               WHERE key = $1 AND status = 'in_progress' AND lease_expires_at > now()`,
              [key],
            )
          ).length > 0,
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
