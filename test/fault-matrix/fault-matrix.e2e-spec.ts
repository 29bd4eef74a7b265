import { IdempotencyStore, idempotencyMigrations } from '../../src/index.js';
import { until } from '../utils/barrier.js';
import { FakeGateway, requestCharge } from '../utils/fake-gateway.js';
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
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { CreatePayments1764000000100 } from './create-payments.migration.js';
import {
  Control,
  faultMatrixModule,
  type PaymentResponse,
} from './fault-matrix.module.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';
import {
  AMOUNT,
  asRefusal,
  failed,
  label,
  LEASE_OVER,
  MAX_TRIES,
  OTHER_AMOUNT,
  OVER_LIMIT,
  read,
  refusal,
  type Reply,
} from './replies.js';

/** The lease of claims: short, so that a claim left behind frees its key soon. */
const LEASE_MS = 1_000;

/** One request of a cell, and what the cell can do with it. */
interface Run {
  readonly key: string;
  readonly route: 'payments' | 'limited';
  readonly target: TestApp;
  readonly faults: StatementFaults;
  readonly control: Control;
  /**
   * The answers after which the binding probe was sent (another body
   * under the key, refused with 422), in order.
   */
  readonly probed: string[];
  /** Sends the request (same key, same body). */
  send(): Promise<Response>;
  /** The answers of one client: `first`, then retries past 503 and 409. */
  settle(first: Promise<Response>): Promise<Reply[]>;
}

/** A point of the matrix. */
interface Cell {
  readonly point: string;
  readonly when: 'before' | 'after';
  readonly route?: 'limited';
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
   * each, another body under the key gets 422 (see `probeBinding`).
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
const claim = fn('idempotency_acquire');
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
  when: 'before' | 'after',
  at: (run: Run) => (statement: Statement) => boolean,
  timing: FaultTiming,
  expected: readonly string[],
  options: Partial<
    Pick<Cell, 'route' | 'gatewayCalls' | 'runsAgain' | 'probed'>
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
        return [replies];
      } finally {
        fault.disarm();
      }
    },
  };
}

/**
 * The renewal's session ends while the handler waits (after its charge,
 * holding no connection): a later renewal keeps the lease, and a duplicate
 * is refused meanwhile.
 */
function renewalCell(when: 'before' | 'after'): Cell {
  return {
    point: 'renewal',
    when,
    expected: [['201']],
    async run(run) {
      const held = run.control.holdAfterCharge(run.key);
      const fault = run.faults.arm({ matches: renewal(run), timing: when });
      try {
        const first = run.send();
        await held.reached();
        await until(
          () => Promise.resolve(fault.hit),
          `a renewal of ${run.key}`,
          LEASE_MS,
        );
        await fault.injected;
        const [{ lease }] = await run.target.db.query<{ lease: string }>(
          `SELECT lease_expires_at::text AS lease FROM idempotency_records WHERE key = $1`,
          [run.key],
        );
        await until(
          async () =>
            (
              await run.target.db.query(
                `SELECT 1 FROM idempotency_records
                 WHERE key = $1 AND lease_expires_at > $2::timestamptz`,
                [run.key, lease],
              )
            ).length === 1,
          `a renewal of ${run.key} after the lost one`,
          LEASE_MS,
        );
        const duplicate = await read(run.send());
        expect(label(duplicate)).toBe('409');
        held.open();
        return [await run.settle(first)];
      } finally {
        held.open();
        fault.disarm();
      }
    },
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
  statementCell('claim', 'after', claim, 'after', ['503', '409', '201']),
  statementCell('step read', 'before', readStep, 'before', ['503', '201']),
  statementCell('step read', 'after', readStep, 'after', ['503', '201']),
  // The gateway charged, its result was not saved: the retry charges again
  // under the same derived key, which the gateway answers with the charge.
  statementCell('step save', 'before', saveStep, 'before', ['503', '201'], {
    gatewayCalls: 2,
  }),
  // From here on, the charge step committed before the attempt failed:
  // another body under the key is refused after each failed answer.
  statementCell('step save', 'after', saveStep, 'after', ['503', '201'], {
    probed: ['503'],
  }),
  statementCell(
    'transaction begin',
    'before',
    begin,
    'before',
    ['503', '201'],
    { probed: ['503'] },
  ),
  statementCell('transaction begin', 'after', begin, 'after', ['503', '201'], {
    probed: ['503'],
  }),
  statementCell('first write', 'before', begin, 'after-reply', ['503', '201'], {
    probed: ['503'],
  }),
  statementCell('first write', 'after', paymentWrite, 'after', ['503', '201'], {
    probed: ['503'],
  }),
  statementCell(
    'last write',
    'before',
    ledgerWrite('customer'),
    'after-reply',
    ['503', '201'],
    { probed: ['503'] },
  ),
  statementCell(
    'last write',
    'after',
    ledgerWrite('merchant'),
    'after',
    ['503', '201'],
    { probed: ['503'] },
  ),
  // The handler returns unaware that its writes are gone.
  statementCell(
    'completion',
    'before',
    ledgerWrite('merchant'),
    'after-reply',
    ['503', '201'],
    { probed: ['503'] },
  ),
  statementCell('completion', 'after', completion, 'after', ['503', '201'], {
    probed: ['503'],
  }),
  statementCell('commit', 'before', completion, 'after-reply', ['503', '201'], {
    probed: ['503'],
  }),
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
 * one charge, for the request's own amount, no step left behind. The other
 * stores' matrix: store-matrix.ts.
 */
describe.each(PLATFORMS)('the fault matrix (%s)', (platform) => {
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
      idempotency: { gc: false, lease: `${LEASE_MS}ms` },
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
  const expectConsistent = async (run: Run, reply: Reply) => {
    const now = await state(run.key);
    const completed = now.record?.status === 'completed';
    if (run.route === 'limited') {
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

  /** Whether a `charge` step of `key` has committed. */
  const chargeCommitted = async (key: string) =>
    (
      await target.db.query(
        `SELECT 1 FROM idempotency_steps WHERE key = $1 AND step = 'charge'`,
        [key],
      )
    ).length === 1;

  /**
   * I6 after a failed answer whose key has a committed `charge` step:
   * another body under the key gets 422 problem+json, its handler does not
   * run, the gateway is not called (not even under the key's derived key),
   * and the key's record and steps stay as they were, for the request that
   * charged to resume.
   */
  const probeBinding = async (run: Run, after: string) => {
    run.probed.push(after);
    const derivedKey = `${run.key}:charge`;
    const before = {
      runs: control.runs.get(run.key) ?? 0,
      gatewayCalls: gateway.calls.get(derivedKey) ?? 0,
      charges: gateway.chargeCount,
      record: await recordRow(run.key),
      state: await state(run.key),
    };
    const probe = await read(
      send(target, '/payments', {
        key: run.key,
        body: { reference: run.key, amount: OTHER_AMOUNT },
      }),
    );
    expect(asRefusal(probe, after)).toEqual(refusal(run.key, after));
    expect({
      runs: control.runs.get(run.key) ?? 0,
      gatewayCalls: gateway.calls.get(derivedKey) ?? 0,
      charges: gateway.chargeCount,
      record: await recordRow(run.key),
      state: await state(run.key),
    }).toEqual(before);
  };

  /** Waits until no live claim holds `key`: a claim nobody renews lapses within its lease. */
  const untilClaimFree = (key: string) =>
    until(
      async () =>
        (
          await target.db.query(
            `SELECT 1 FROM idempotency_records
             WHERE key = $1 AND status = 'in_progress' AND lease_expires_at > now()`,
            [key],
          )
        ).length === 0,
      `the claim of ${key} to lapse within its lease`,
      LEASE_MS + 1_000,
    );

  const runOf = (cell: Cell): Run => {
    const key = `fm-${platform}-${cell.point.replaceAll(' ', '-')}-${cell.when}`;
    const route = cell.route ?? 'payments';
    const path = route === 'limited' ? '/payments/limited' : '/payments';
    const body = {
      reference: key,
      amount: route === 'limited' ? OVER_LIMIT : AMOUNT,
    };
    const run: Run = {
      key,
      route,
      target,
      faults,
      control,
      probed: [],
      send: () => send(target, path, { key, body }),
      async settle(first) {
        const replies: Reply[] = [];
        let next = first;
        for (;;) {
          const reply = await read(next);
          replies.push(reply);
          await expectConsistent(run, reply);
          if (
            route === 'payments' &&
            failed(reply) &&
            (await chargeCommitted(key))
          ) {
            await probeBinding(run, label(reply));
          }
          if (reply.status !== 503 && reply.status !== 409) {
            return replies;
          }
          if (replies.length >= MAX_TRIES) {
            throw new Error(
              `${key}: no answer past ${replies.map(label).join(', ')}`,
            );
          }
          if (reply.status === 409) {
            await untilClaimFree(key);
            // Released by its lease's end, the key stays bound.
            if (route === 'payments' && (await chargeCommitted(key))) {
              await probeBinding(run, LEASE_OVER);
            }
          }
          next = run.send();
        }
      },
    };
    return run;
  };

  it.each(CELLS)('$point / $when', async (cell) => {
    const run = runOf(cell);
    const charges = gateway.chargeCount;
    const clients = await cell.run(run);

    // No 500, and each client got what the cell expects.
    expect(
      clients.flat().filter((r) => r.status >= 500 && r.status !== 503),
    ).toEqual([]);
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
    if (run.route === 'limited') {
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
    const derivedKey = `${run.key}:charge`;
    expect(gateway.chargeCount).toBe(charges + 1);
    expect(gateway.calls.get(derivedKey)).toBe(cell.gatewayCalls ?? 1);
    // The gateway's charge for the key (it answers a known key with it).
    const charge = await requestCharge(gateway.url, AMOUNT, derivedKey);
    expect(charge).toEqual({ id: body.chargeId, amount: AMOUNT });
  });
});
