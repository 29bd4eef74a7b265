import type { INestApplication } from '@nestjs/common';
import { IdempotencyStore } from '../../src/index.js';
import {
  CLAIM,
  completeStatements,
  COMPLETE_ALONE,
  READ_HOLDER,
  READ_STEP,
} from '../../src/stores/postgres/postgres-statements.js';
import { until } from '../utils/barrier.js';
import {
  PRESENCE_APPLICATION_NAME,
  presenceSessions,
  terminateBackend,
} from '../utils/sessions.js';
import type {
  FaultTiming,
  Statement,
  StatementFaults,
} from '../utils/statement-faults.js';
import type { TestDatabase } from '../utils/test-database.js';
import type { CellClient } from './client.js';
import type { Control } from './control.js';
import { renewalLost } from './renewal-lost.js';
import { label, read, type Reply } from './replies.js';

/** The module's completion, on the test database's `public` tables. */
const { complete: COMPLETE } = completeStatements('public');

/** A running payments application of the matrix, on any data library. */
export interface MatrixTarget {
  readonly app: INestApplication;
  /** Base URL of its HTTP server. */
  readonly url: string;
  readonly db: TestDatabase;
  /** Closes the application and drops its database. */
  close(): Promise<void>;
}

/**
 * The lease of the renewal cells. They check a duplicate against a lease
 * a renewal just moved: a pause of the machine longer than the lease
 * between the two (renewals come every third of it) would end it and let
 * the duplicate take over, which is another cell's fault, not this one's.
 */
export const RENEWAL_LEASE_MS = 3_000;

/** One request of a cell, and what the cell can do with it. */
export interface Run extends CellClient {
  /** The lease of the application's claims (ms). */
  readonly leaseMs: number;
  readonly target: MatrixTarget;
  readonly faults: StatementFaults;
  readonly control: Control;
}

/** A point of the matrix. */
export interface Cell {
  readonly point: string;
  /** `in reply`: the server's error for the session's end answers the statement. */
  readonly when: 'before' | 'after' | 'in reply';
  readonly route?: 'limited';
  /**
   * Whether the fault leaves the claim to its lease (see `ClientCell`);
   * otherwise the retry after a failed answer runs or replays at once.
   */
  readonly claimLeft?: boolean;
  /** Whether the fault fails the claim's release (see `ClientCell`). */
  readonly releasedLate?: boolean;
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
const claim = (run: Run) => (statement: Statement) =>
  statement.text === CLAIM.text && statement.values[1] === run.key;
const holderRead = (run: Run) => (statement: Statement) =>
  statement.text === READ_HOLDER.text && statement.values[1] === run.key;
const readStep = (run: Run) => (statement: Statement) =>
  statement.text === READ_STEP.text && statement.values[1] === run.key;
const saveStep = fn('idempotency_save_step');
/** The store's completion of the request's key, storing a `status` record. */
const completes = (status: string) => (run: Run) => (statement: Statement) =>
  (statement.text === COMPLETE.text ||
    statement.text === COMPLETE_ALONE.text) &&
  statement.values[1] === run.key &&
  statement.values[3] === status;
const completion = completes('completed');
const storedError = completes('failed');
const release = fn('idempotency_release');
const renewal = (run: Run) => (statement: Statement) =>
  statement.text.includes('idempotency_renew(') &&
  Array.isArray(statement.values[1]) &&
  statement.values[1].includes(run.key);
// Only the cell's request runs while its fault is armed.
const begin = () => (statement: Statement) =>
  statement.text.startsWith('START TRANSACTION');
const commit = () => (statement: Statement) => statement.text === 'COMMIT';
/**
 * An insert into `table`, as every data library writes it: `INSERT INTO
 * "payments"`, `insert into "payments"`, `INSERT INTO "public"."payments"`.
 */
const insertInto = (table: string) =>
  new RegExp(
    `^\\s*insert\\s+into\\s+(?:"?public"?\\.)?"?${table}"?[\\s(]`,
    'i',
  );
const PAYMENT_INSERT = insertInto('payments');
const LEDGER_INSERT = insertInto('ledger_entries');
const paymentWrite = (run: Run) => (statement: Statement) =>
  PAYMENT_INSERT.test(statement.text) && statement.values.includes(run.key);
const ledgerWrite = (account: string) => () => (statement: Statement) =>
  LEDGER_INSERT.test(statement.text) && statement.values.includes(account);

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
    Pick<
      Cell,
      | 'route'
      | 'gatewayCalls'
      | 'runsAgain'
      | 'probed'
      | 'claimLeft'
      | 'releasedLate'
    >
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
 * A duplicate's read of what holds the key (its second statement, after
 * the claim took nothing) loses its connection, before or after it ran:
 * it wrote nothing, the duplicate gets 503 and its retry replays.
 */
function holderReadCell(when: 'before' | 'after'): Cell {
  return {
    point: 'holder read',
    when,
    expected: [['201'], ['503', '201 replayed']],
    async run(run) {
      const first = await run.settle(run.send());
      const fault = run.faults.arm({ matches: holderRead(run), timing: when });
      try {
        const duplicate = await run.settle(run.send());
        expect(fault.hit).toBe(true);
        await fault.injected;
        return [first, duplicate];
      } finally {
        fault.disarm();
      }
    },
  };
}

/**
 * The presence session ends: before the claim (it is written without the
 * instance, and only its lease protects it), or while the request runs
 * (its instance looks gone to other instances, but the instance itself
 * lives and knows its request runs: a duplicate it gets is refused, never
 * run beside the first, which completes). The session's return is held
 * meanwhile.
 */
function presenceCell(when: 'before' | 'after'): Cell {
  return {
    point: 'presence',
    when,
    expected: when === 'before' ? [['201']] : [['201'], ['201 replayed']],
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
        await restoring.reached();
        // The instance's own request runs: its duplicate is refused.
        expect(label(await read(run.send()))).toBe('409');
        held.open();
        const answers = await run.settle(first);
        return [answers, await run.settle(run.send())];
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

/** Every point of the matrix, before and after. */
export const CELLS: readonly Cell[] = [
  statementCell('claim', 'before', claim, 'before', ['503', '201']),
  // The claim committed, its answer lost: released by its owner before the
  // 503, the key is free for the retry at once.
  statementCell('claim', 'after', claim, 'after', ['503', '201']),
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
  holderReadCell('before'),
  holderReadCell('after'),
  // The handler fails after its first write, and the release's connection
  // is lost: the release is tried again (on another connection) until it
  // lands, which frees the key long before its lease would.
  statementCell(
    'release',
    'before',
    release,
    'before',
    ['503 handler', '201'],
    {
      prepare: (run) => run.control.failOnce(run.key),
      probed: ['503 handler'],
      releasedLate: true,
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
