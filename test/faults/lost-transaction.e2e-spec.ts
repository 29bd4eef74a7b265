import { advisoryLocks, until, untilAdvisoryLocks } from '../utils/barrier.js';
import { answer, inProgress, UNAVAILABLE_ANSWER } from '../utils/problems.js';
import {
  idleInTransaction,
  PRESENCE_APPLICATION_NAME,
  sessions,
  terminateBackend,
  untilIdleInTransaction,
} from '../utils/sessions.js';
import { holdInTransaction, onServer } from '../utils/test-database.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  lockOf,
  LostTransactionTestModule,
  Pause,
} from './lost-transaction.module.js';

describe.each(PLATFORMS)(
  'a handler that loses its transaction (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [LostTransactionTestModule],
        // Room for one transaction of the module: who gets it, and when, is
        // what the scenarios look at.
        typeorm: { poolSize: 2 },
        // A claim whose release cannot reach the server frees its key when
        // its lease runs out.
        idempotency: { gc: false, lease: '2s' },
      });
    });
    afterAll(() => target?.close());

    const orders = async (reference: string) =>
      (
        await target.db.query<{ source: string }>(
          `SELECT source FROM orders WHERE reference = $1 ORDER BY id`,
          [reference],
        )
      ).map((row) => row.source);
    const records = (keys: string[]) =>
      target.db.query<{ key: string; status: string }>(
        `SELECT key, status FROM idempotency_records WHERE key = ANY($1) ORDER BY key`,
        [keys],
      );
    const created = (body: unknown) => ({
      status: 201,
      contentType: expect.stringMatching(/^application\/json/) as unknown,
      retryAfter: null,
      replayed: false,
      body,
    });

    /**
     * Sends `body` to `route`, holds its handler idle in its transaction after
     * its first write, and ends that transaction's session: returns its
     * barrier (still closed) and its answer to come, once TypeORM released
     * the lost connection.
     */
    const loseHeldTransaction = async (
      route: string,
      body: { reference: string },
      key?: string,
    ) => {
      const pause = target.app.get(Pause);
      const held = pause.hold(body.reference);
      const late = answer(send(target, route, { key, body }));
      await held.reached(1);
      // Its transaction, idle after the first write, is the app's only one.
      const [pid] = await untilIdleInTransaction(target.db, 1);
      await terminateBackend(target.db, pid);
      // The app saw its connection break while idle: TypeORM released the
      // query runner before the handler's next statement.
      await until(
        async () => pause.queryRunner?.isReleased === true,
        'TypeORM to release the lost connection',
      );
      return { held, late };
    };

    it('writes nothing once PostgreSQL ended its session: 503, its next write fails, its place stays taken until it ends, and the retry executes once', async () => {
      const pause = target.app.get(Pause);
      const key = 'terminated-1';
      const body = { reference: 'terminated' };
      const { held, late } = await loseHeldTransaction('/late', body, key);
      // Meanwhile a request needing a transaction waits for the only place,
      // which the lost transaction keeps until its handler ends: at its own
      // deadline (500 ms) it gets a 503, and its claim is released.
      const waiting = await answer(
        send(target, '/late/short', {
          key: 'terminated-waiting',
          body: { reference: 'terminated-waiting' },
        }),
      );
      expect(waiting).toEqual(UNAVAILABLE_ANSWER);

      held.open();
      const failed = await late;
      // Its second write neither ran in a new transaction of its own nor
      // committed without the record: it failed.
      expect(pause.late.get(body.reference)).toBe(
        'QueryRunnerAlreadyReleasedError',
      );
      expect(failed).toEqual(UNAVAILABLE_ANSWER);
      expect(await orders(body.reference)).toEqual([]);
      expect(await orders('terminated-waiting')).toEqual([]);
      // Both claims were released: the retries run at once.
      expect(await records([key, 'terminated-waiting'])).toEqual([]);

      const retry = await answer(send(target, '/late', { key, body }));
      expect(retry).toEqual(created({ run: 2 }));
      expect(await orders(body.reference)).toEqual([
        'run-2-first',
        'run-2-second',
      ]);
      expect(await records([key])).toEqual([{ key, status: 'completed' }]);
      console.log(
        `lost transaction (${platform}): first attempt ${failed.status}, late write ${pause.late.get(body.reference)}; ` +
          `a request waiting for its place ${waiting.status}; retry ${retry.status}, orders ${(await orders(body.reference)).join(', ')}`,
      );
    });

    it('never writes its completion elsewhere once its transaction was lost after its last write: 503, no record, no replay, and the retry executes once', async () => {
      const key = 'lost-before-completion-1';
      const body = { reference: 'lost-before-completion' };
      const { held, late } = await loseHeldTransaction('/late/once', body, key);
      // The handler returns without another statement: the completion is
      // the first to need the lost transaction.
      held.open();
      const failed = await late;
      expect(failed).toEqual(UNAVAILABLE_ANSWER);
      expect(await orders(body.reference)).toEqual([]);
      // Neither completed on another connection nor left claimed.
      expect(await records([key])).toEqual([]);

      const retry = await answer(send(target, '/late/once', { key, body }));
      expect(retry).toEqual(created({ run: 2 }));
      expect(await orders(body.reference)).toEqual(['run-2-only']);
      expect(await records([key])).toEqual([{ key, status: 'completed' }]);
      const replay = await answer(send(target, '/late/once', { key, body }));
      expect(replay).toEqual({ ...created({ run: 2 }), replayed: true });
      expect(await orders(body.reference)).toEqual(['run-2-only']);
    });

    it('answers 503, never success, to a request without a key whose transaction was lost after its last write', async () => {
      const body = { reference: 'lost-keyless' };
      const { held, late } = await loseHeldTransaction(
        '/late/once-optional',
        body,
      );
      held.open();
      expect(await late).toEqual(UNAVAILABLE_ANSWER);
      expect(await orders(body.reference)).toEqual([]);
    });

    it('is abandoned at its deadline: 503 while it still waits, rolled back at once, its place and its key free, and its late write never commits', async () => {
      const pause = target.app.get(Pause);
      const key = 'deadline-1';
      const body = { reference: 'deadline' };
      const next = {
        key: 'deadline-next',
        body: { reference: 'deadline-next' },
      };
      const held = pause.hold(body.reference);
      const late = answer(send(target, '/late/deadline', { key, body }));
      await held.reached(1);
      await untilIdleInTransaction(target.db, 1);
      // A duplicate is refused meanwhile. Its claim's lease ends with its
      // deadline, in less than a second: the retry is announced after 1 s,
      // not at once.
      expect(
        await answer(send(target, '/late/deadline', { key, body })),
      ).toEqual({
        status: 409,
        contentType: expect.stringMatching(/^application\/problem\+json/),
        retryAfter: '1',
        replayed: false,
        body: inProgress(key),
      });
      // The next request needs the only place, which the held one has.
      const nextAnswer = answer(send(target, '/late', next));

      // Its deadline (1 s) passes while its handler still waits: the module
      // answers 503 without it, and rolls its transaction back.
      expect(await late).toEqual(UNAVAILABLE_ANSWER);
      // The place went to the next request, which ran and committed while
      // the abandoned handler was still held.
      expect(await nextAnswer).toEqual(created({ run: 1 }));
      expect(await orders(next.body.reference)).toEqual([
        'run-1-first',
        'run-1-second',
      ]);
      // Nothing of the abandoned run is left on the server, and its key is
      // free at once.
      expect(await idleInTransaction(target.db)).toEqual([]);
      expect(await orders(body.reference)).toEqual([]);
      expect(await records([key])).toEqual([]);

      const retry = await answer(send(target, '/late/deadline', { key, body }));
      expect(retry).toEqual(created({ run: 2 }));

      held.open();
      await until(
        async () => pause.late.has(body.reference),
        'the abandoned run to try its late write',
      );
      // Its late write failed, saying why: it ran neither in the abandoned
      // transaction nor in one of its own.
      expect(pause.late.get(body.reference)).toBe('AbandonedTransactionError');
      expect(await orders(body.reference)).toEqual([
        'run-2-first',
        'run-2-second',
      ]);
      expect(await records([key])).toEqual([{ key, status: 'completed' }]);
      const replay = await answer(
        send(target, '/late/deadline', { key, body }),
      );
      expect(replay).toEqual({ ...created({ run: 2 }), replayed: true });
      console.log(
        `abandoned at the deadline (${platform}): client ${UNAVAILABLE_ANSWER.status}, next request ${(await nextAnswer).status} in its place, ` +
          `retry ${retry.status}, late write ${pause.late.get(body.reference)}, orders ${(await orders(body.reference)).join(', ')}`,
      );
    });

    it('is abandoned at its deadline inside a statement: the statement is cancelled, 503 at the deadline, nothing committed, the retry executes once', async () => {
      const pause = target.app.get(Pause);
      const key = 'deadline-statement-1';
      const body = { reference: 'deadline-statement' };
      // The run waits, after its first write, for a lock the test holds.
      const holder = await holdInTransaction(
        target.db.url,
        'SELECT pg_advisory_xact_lock($1)',
        [lockOf(body.reference)],
      );
      try {
        pause.block(body.reference);
        const late = answer(send(target, '/late/deadline', { key, body }));
        await untilAdvisoryLocks(target.db, 'waiting', 1);

        // At its deadline (1 s) the module cancels the statement and answers
        // 503, though the lock is still held.
        expect(await late).toEqual(UNAVAILABLE_ANSWER);
        expect(pause.late.get(body.reference)).toBe('QueryFailedError 57014');
        expect(await advisoryLocks(target.db, 'waiting')).toBe(0);
        // No transaction of the app is left open: only the test's own, which
        // holds the lock.
        expect(await idleInTransaction(target.db)).toEqual([
          expect.any(Number),
        ]);
        expect(await orders(body.reference)).toEqual([]);
        expect(await records([key])).toEqual([]);

        const retry = await answer(
          send(target, '/late/deadline', { key, body }),
        );
        expect(retry).toEqual(created({ run: 2 }));
        expect(await orders(body.reference)).toEqual([
          'run-2-first',
          'run-2-second',
        ]);
        console.log(
          `abandoned in a statement (${platform}): client 503 with the lock still held, statement ${pause.late.get(body.reference)}; ` +
            `retry ${retry.status}, orders ${(await orders(body.reference)).join(', ')}`,
        );
      } finally {
        await holder.release();
      }
    });

    it('gets 503 when its transaction cannot begin (the server refuses new connections): nothing written, its key free when its lease runs out, the retry executes once', async () => {
      const pause = target.app.get(Pause);
      const key = 'refused-1';
      const body = { reference: 'refused' };
      const database = new URL(target.db.url).pathname.slice(1);
      const before = pause.holdBefore(body.reference);
      const late = answer(send(target, '/late', { key, body }));
      await before.reached(1);
      // The handler, claimed and holding nothing, waits before its first
      // statement while the database stops accepting connections and the
      // app's pooled ones end (its presence session stays).
      await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
      try {
        for (const session of await sessions(target.db)) {
          if (session.applicationName !== PRESENCE_APPLICATION_NAME) {
            await terminateBackend(target.db, session.pid);
          }
        }
        before.open();
        expect(await late).toEqual(UNAVAILABLE_ANSWER);
        // Refused (55000), or, when the pool hands out an idle connection
        // whose termination it has not noticed yet, terminated (57P01).
        expect(['error 55000', 'error 57P01']).toContain(
          pause.late.get(body.reference),
        );
        // Its release could not reach the server either: the claim stays,
        // until its lease runs out.
        expect(await records([key])).toEqual([{ key, status: 'in_progress' }]);
      } finally {
        await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
      }
      expect(await orders(body.reference)).toEqual([]);
      await until(
        async () =>
          (
            await target.db.query(
              `SELECT 1 FROM idempotency_records
               WHERE key = $1 AND lease_expires_at > now()`,
              [key],
            )
          ).length === 0,
        'the lease of the claim left behind to run out',
      );
      const retry = await answer(send(target, '/late', { key, body }));
      expect(retry).toEqual(created({ run: 2 }));
      expect(await orders(body.reference)).toEqual([
        'run-2-first',
        'run-2-second',
      ]);
      console.log(
        `transaction refused (${platform}): client 503, first statement ${pause.late.get(body.reference)}, ` +
          `claim left to its lease; retry ${retry.status}, orders ${(await orders(body.reference)).join(', ')}`,
      );
    });
  },
);
