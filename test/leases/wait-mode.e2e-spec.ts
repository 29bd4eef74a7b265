import {
  CLAIM,
  MARK_WAITING,
  READ_HOLDER,
} from '../../src/stores/postgres/postgres-statements.js';
import { Barrier, untilWaiting } from '../utils/barrier.js';
import { lockWaiters } from '../utils/sessions.js';
import { listen, type Listener } from '../utils/notifications.js';
import { logStatements } from '../utils/statement-counter.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { Gate, waitModeModule } from './wait-mode.module.js';

/** Channel the owner of a key notifies its waiters on. */
const CHANNEL = 'idempotency_records';
/** Completions of keys nobody waits for. */
const UNWAITED = 20;
/** The lease: renewed every 2 s. */
const LEASE_SECONDS = 6;

interface Answer {
  status: number;
  replayed: boolean;
  contentType: string | null;
  text: string;
}

async function answer(response: Promise<Response>): Promise<Answer> {
  const r = await response;
  return {
    status: r.status,
    replayed: r.headers.get('idempotent-replayed') === 'true',
    contentType: r.headers.get('content-type'),
    text: await r.text(),
  };
}

/**
 * A request left running while the test goes on: if the test fails first,
 * its end (the app closing under it) is not reported as another failure.
 */
function inFlight<T>(request: Promise<T>): Promise<T> {
  request.catch(() => undefined);
  return request;
}

describe.each(PLATFORMS)(
  'waiting duplicates across instances (%s)',
  (platform) => {
    let db: TestDatabase;
    let a: TestApp;
    let b: TestApp;
    let completions: Listener;
    let renewals: Listener;

    beforeAll(async () => {
      db = await createTestDatabase();
      // The owner renews its lease every LEASE / 3; the test watches the
      // renewals to let time pass while the duplicate waits, well within
      // one lease: nothing but the owner's completion (or a lease running
      // out) has to make the duplicate look at the key again.
      const idempotency = { lease: `${LEASE_SECONDS}s`, gc: false } as const;
      a = await startTestApp({
        platform,
        database: db,
        imports: [waitModeModule('A')],
        idempotency,
      });
      b = await startTestApp({
        platform,
        database: db,
        imports: [waitModeModule('B')],
        idempotency,
      });
      // The test's own view of renewals: a trigger on the record table that
      // notifies another channel each time an owner extends its lease.
      await db.query(`
      CREATE FUNCTION test_lease_renewed() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify('test_lease_renewed', NEW.key);
        RETURN NEW;
      END $$`);
      await db.query(`
      CREATE TRIGGER test_lease_renewed AFTER UPDATE OF lease_expires_at
      ON idempotency_records FOR EACH ROW
      WHEN (NEW.status = 'in_progress' AND OLD.owner = NEW.owner
            AND NEW.lease_expires_at > OLD.lease_expires_at)
      EXECUTE FUNCTION test_lease_renewed()`);
      completions = await listen(db.url, CHANNEL);
      renewals = await listen(db.url, 'test_lease_renewed');
    });
    afterAll(async () => {
      a?.app.get(Gate).barrier.open();
      await completions?.close();
      await renewals?.close();
      await a?.close();
      await b?.close();
      await db?.drop();
    });

    const orders = (reference: string) =>
      db.query<{ id: number; source: string }>(
        'SELECT id, source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      );
    /** Completes `count` new keys on `instance`, each without any duplicate. */
    const completeUnwaited = async (
      instance: TestApp,
      route: string,
      prefix: string,
      count: number,
    ) => {
      const answers = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          answer(
            send(instance, `/wait-mode/${route}`, {
              key: `${prefix}-${i}`,
              body: { reference: `ref-${prefix}-${i}` },
            }),
          ),
        ),
      );
      expect(answers.map((r) => r.status)).toEqual(answers.map(() => 201));
    };

    it("a duplicate on another instance sends no statement while it waits, and is woken by the owner's NOTIFY", async () => {
      const key = 'waited-1';
      const reference = 'ref-waited-1';
      const body = { reference };
      const gateA = a.app.get(Gate);
      const gateB = b.app.get(Gate);
      gateA.barrier = new Barrier();
      gateA.held.add(reference);
      const owner = inFlight(answer(send(a, '/wait-mode/wait', { key, body })));
      await gateA.barrier.reached(1);

      const statements = logStatements(b.dataSource);
      const duplicate = inFlight(
        answer(send(b, '/wait-mode/wait', { key, body })),
      );
      // B's claim found the key in progress, and B marked it waited for.
      await untilWaiting(db, key);
      expect(statements.statements).toEqual([
        CLAIM.text,
        READ_HOLDER.text,
        MARK_WAITING.text,
      ]);

      // Time passes: A renews its lease twice (2 to 4 s, within the 6 s the
      // duplicate's claim saw left) and completes other keys; nobody waits
      // for those, so none is notified.
      const renewed = renewals.payloads.filter((p) => p === key).length;
      await completeUnwaited(a, 'wait', 'unwaited-a', UNWAITED);
      await renewals.next((p) => p === key, renewed + 2);
      expect(await completions.drain()).toEqual([]);
      // B sent nothing more while it waited: no polling.
      expect(statements.statements).toHaveLength(3);
      expect(gateB.ran).toEqual([]);

      gateA.barrier.open();
      const executed = await owner;
      expect(executed).toEqual({
        status: 201,
        replayed: false,
        contentType: expect.stringMatching(/^application\/json/),
        text: expect.any(String),
      });
      const woken = await duplicate;
      statements.stop();
      expect(woken).toEqual({ ...executed, replayed: true });
      // One notification, for the key that had a waiter.
      expect(await completions.drain()).toEqual([`global\u001f${key}`]);
      expect(gateB.ran).toEqual([]);
      expect(await orders(reference)).toEqual([
        {
          id: (JSON.parse(executed.text) as { id: number }).id,
          source: 'A',
        },
      ]);
      console.log(
        `wait mode (${platform}): the waiting duplicate sent ${statements.statements.length} statement(s) in all ` +
          `(2 before waiting: the claim and its mark; none while the owner renewed its ${LEASE_SECONDS} s lease twice and completed ${UNWAITED} other keys): ` +
          statements.statements
            .map((text) => text.replace(/\s+/g, ' ').slice(0, 60))
            .join(' | '),
      );
    });

    it('completions without a waiter notify nobody, whichever instance and mode; a rejected duplicate is no waiter', async () => {
      const gateA = a.app.get(Gate);
      await completeUnwaited(a, 'wait', 'quiet-a', UNWAITED);
      await completeUnwaited(b, 'reject', 'quiet-b', UNWAITED);
      expect(await completions.drain()).toEqual([]);

      // A duplicate in reject mode gets 409 and leaves: nothing to wake.
      const key = 'rejected-1';
      const reference = 'ref-rejected-1';
      gateA.barrier = new Barrier();
      gateA.held.add(reference);
      const owner = inFlight(
        answer(send(a, '/wait-mode/reject', { key, body: { reference } })),
      );
      await gateA.barrier.reached(1);
      const refused = await answer(
        send(b, '/wait-mode/reject', { key, body: { reference } }),
      );
      expect(refused.status).toBe(409);
      expect(
        await db.query(
          'SELECT waiting FROM idempotency_records WHERE key = $1',
          [key],
        ),
      ).toEqual([{ waiting: false }]);
      gateA.barrier.open();
      expect((await owner).status).toBe(201);
      expect(await completions.drain()).toEqual([]);
      expect(
        await db.query(
          `SELECT count(*)::int AS completed FROM idempotency_records
         WHERE status = 'completed' AND (key LIKE 'quiet-%' OR key = $1)`,
          [key],
        ),
      ).toEqual([{ completed: 2 * UNWAITED + 1 }]);
    });
  },
);

describe('waiting duplicates of a record that another session locks', () => {
  const POOL_SIZE = 3;
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [waitModeModule('A')],
      typeorm: { poolSize: POOL_SIZE },
      // The held request's lease runs out at its deadline: its duplicates
      // mark it waited for, then try to take it over.
      idempotency: { gc: false, transactionTimeout: '2s' },
    });
  });
  afterAll(async () => {
    target?.app.get(Gate).barrier.open();
    await target?.close();
  });

  it(`get 503 without leaving a statement waiting on the lock: after ${2 * POOL_SIZE} of them, the pool of ${POOL_SIZE} still serves other keys`, async () => {
    const gate = target.app.get(Gate);
    gate.held.add('ref-locked');
    const held = inFlight(
      send(target, '/wait-mode/wait', {
        key: 'locked',
        body: { reference: 'ref-locked' },
      }),
    );
    await gate.barrier.reached(1);
    // An operator's session, or a completion whose COMMIT is slow.
    const lock = await holdInTransaction(
      target.db.url,
      `SELECT 1 FROM idempotency_records WHERE key = 'locked' FOR UPDATE`,
    );
    try {
      for (let i = 0; i < 2 * POOL_SIZE; i++) {
        const duplicate = await send(target, '/wait-mode/wait', {
          key: 'locked',
          body: { reference: 'ref-locked' },
        });
        expect(duplicate.status).toBe(503);
      }
      const other = await answer(
        send(target, '/wait-mode/wait', {
          key: 'other',
          body: { reference: 'ref-other' },
        }),
      );
      expect(other.status).toBe(201);
      // The held request's release, tried again, may wait its second.
      expect(
        (await lockWaiters(target.db, 'idempotency_records')).length,
      ).toBeLessThanOrEqual(1);
    } finally {
      await lock.release();
      gate.barrier.open();
    }
    expect((await held).status).toBe(503);
  }, 30_000);
});
