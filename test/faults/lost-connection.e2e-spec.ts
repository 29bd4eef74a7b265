import { completeStatements } from '../../src/stores/postgres/postgres-statements.js';
import { answer, UNAVAILABLE_ANSWER, type Answer } from '../utils/problems.js';
import { terminateBackend, untilIdleInTransaction } from '../utils/sessions.js';
import {
  StatementFaults,
  typeormPool,
  type FaultTiming,
  type Statement,
} from '../utils/statement-faults.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { LostTransactionTestModule, Pause } from './lost-transaction.module.js';

/** The module's completion, on the test database's `public` tables. */
const { complete: COMPLETE } = completeStatements('public');

/**
 * The claims' lease: long, so that a claim left behind by a lost
 * connection still holds its key when the retry comes (a 409), however
 * busy the machine.
 */
const LEASE = '15s';
/** Tries of each scenario, per platform. */
const TRIES = 20;

/** Where the handler's session ends as it returns: a statement and a timing. */
interface Point {
  readonly statement: 'completion' | 'commit';
  readonly timing: Exclude<FaultTiming, 'after-reply'>;
}

/**
 * The statements of a handler's return, each with the session ended at it
 * in each way that leaves nothing committed (a COMMIT that ran is a
 * replay, not a failure). `commit / in-reply` is issue 39: the server's
 * error answers the COMMIT before the driver sees the socket close.
 */
const POINTS: readonly Point[] = [
  { statement: 'completion', timing: 'before' },
  { statement: 'completion', timing: 'in-reply' },
  { statement: 'completion', timing: 'after' },
  { statement: 'commit', timing: 'before' },
  { statement: 'commit', timing: 'in-reply' },
];

/** What one try of a scenario got: its first answer and its retry's. */
interface Outcome {
  readonly point: string;
  readonly first: number;
  readonly retry: string;
}

const labelOf = (reply: Answer) =>
  `${reply.status}${reply.replayed ? ' replayed' : ''}`;

/**
 * Issue 39 (I4): a handler that wrote, is parked, and whose session
 * PostgreSQL ends as it returns, gets a 503 with nothing committed, and
 * its key is free at once: the retry sent right after the 503 runs the
 * handler (201), never a 409 until the lease ends.
 */
describe.each(PLATFORMS)(
  'a handler whose connection is lost as it returns (%s)',
  (platform) => {
    let target: TestApp;
    let faults: StatementFaults;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [LostTransactionTestModule],
        idempotency: { gc: false, lease: LEASE },
      });
      faults = await StatementFaults.install(
        typeormPool(target.dataSource),
        target.db.url,
      );
    });
    afterAll(async () => {
      await faults?.restore();
      await target?.close();
    });

    const orders = async (reference: string) =>
      (
        await target.db.query<{ source: string }>(
          `SELECT source FROM orders WHERE reference = $1 ORDER BY id`,
          [reference],
        )
      ).map((row) => row.source);
    const record = async (key: string) =>
      (
        await target.db.query<{ status: string }>(
          `SELECT status FROM idempotency_records WHERE key = $1`,
          [key],
        )
      )[0]?.status;

    /**
     * Sends the try's request and parks its handler after its write, idle
     * in its transaction; returns its barrier and its answer to come.
     */
    const park = async (reference: string, key: string) => {
      const pause = target.app.get(Pause);
      const held = pause.hold(reference);
      const first = answer(
        send(target, '/late/once', { key, body: { reference } }),
      );
      await held.reached(1);
      const [pid] = await untilIdleInTransaction(target.db, 1);
      return { held, first, pid };
    };

    /** The retry, sent as soon as the first answer came. */
    const retry = (reference: string, key: string) =>
      answer(send(target, '/late/once', { key, body: { reference } }));

    it(`frees the key at once whatever statement of its return the session ends at: 503, nothing written, the next retry runs (${TRIES} tries)`, async () => {
      const outcomes: Outcome[] = [];
      for (let i = 0; i < TRIES; i += 1) {
        const point = POINTS[i % POINTS.length];
        const key = `lost-return-${platform}-${i}`;
        const reference = key;
        const { held, first } = await park(reference, key);
        const fault = faults.arm({
          matches: (statement: Statement) =>
            point.statement === 'commit'
              ? statement.text === 'COMMIT'
              : statement.text === COMPLETE.text && statement.values[1] === key,
          timing: point.timing,
        });
        held.open();
        const failed = await first;
        fault.disarm();
        expect(fault.hit).toBe(true);
        await fault.injected;
        // Fail closed: the 503, and nothing of the attempt committed.
        expect(failed).toEqual(UNAVAILABLE_ANSWER);
        expect(await orders(reference)).toEqual([]);
        const next = await retry(reference, key);
        outcomes.push({
          point: `${point.statement} / ${point.timing}`,
          first: failed.status,
          retry: labelOf(next),
        });
        if (next.status === 201) {
          expect(next.body).toEqual({ run: 2 });
          expect(await orders(reference)).toEqual(['run-2-only']);
          expect(await record(key)).toBe('completed');
        }
      }
      const refused = outcomes.filter((outcome) => outcome.retry !== '201');
      console.log(
        `lost connection as the handler returns (${platform}): ${outcomes.length} tries, ` +
          `${refused.length} retries refused (${refused.map((o) => `${o.point}: ${o.retry}`).join(', ') || 'none'})`,
      );
      expect(refused).toEqual([]);
    });

    it(`frees the key at once when PostgreSQL ends its session as it returns, as reported: the retry runs, or replays what committed (${TRIES} tries)`, async () => {
      const outcomes: Outcome[] = [];
      for (let i = 0; i < TRIES; i += 1) {
        const key = `lost-race-${platform}-${i}`;
        const reference = key;
        const { held, first, pid } = await park(reference, key);
        // Let go, and end its session at once: it races the handler's
        // completion and COMMIT.
        held.open();
        await terminateBackend(target.db, pid);
        const reply = await first;
        // Its writes and its record committed together, or neither did
        // (a COMMIT that ran may have lost its answer: the retry replays).
        const committed = (await record(key)) === 'completed';
        expect({
          answer: reply.status,
          orders: await orders(reference),
        }).toEqual({
          answer: committed ? expect.any(Number) : 503,
          orders: committed ? ['run-1-only'] : [],
        });
        if (reply.status === 503) {
          expect(reply).toEqual(UNAVAILABLE_ANSWER);
        }
        const next = await retry(reference, key);
        outcomes.push({
          point: committed ? 'committed' : 'rolled back',
          first: reply.status,
          retry: labelOf(next),
        });
        if (next.status === 201 && !committed) {
          expect(next.body).toEqual({ run: 2 });
          expect(await record(key)).toBe('completed');
        }
      }
      const refused = outcomes.filter(
        (outcome) =>
          outcome.retry !==
          (outcome.point === 'committed' ? '201 replayed' : '201'),
      );
      const failures = outcomes.filter((outcome) => outcome.first === 503);
      console.log(
        `lost connection as the handler returns, raced (${platform}): ${outcomes.length} tries, ` +
          `${failures.length} answered 503, ${refused.length} retries refused`,
      );
      expect(refused).toEqual([]);
    });
  },
);
