import { IdempotencyStore, type IdempotencyEvent } from '../../src/index.js';
import { Barrier, until, untilAdvisoryLocks } from '../utils/barrier.js';
import {
  presenceBackend,
  PRESENCE_APPLICATION_NAME,
  terminateBackend,
  untilPresenceRestored,
} from '../utils/sessions.js';
import { TcpGate } from '../utils/tcp-gate.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { Gate, lostLeaseModule } from './lost-lease.module.js';

/** An advisory lock of the test's own, far from the hashes of the module. */
const TAKEOVER_GATE = 424242;

/** What the module answers a request whose claim was lost. */
const UNAVAILABLE = {
  type: 'urn:idempotency:unavailable',
  title: 'Request not completed',
  status: 503,
  detail:
    'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
};

interface Answer {
  status: number;
  replayed: boolean;
  contentType: string | null;
  retryAfter: string | null;
  text: string;
}

async function answer(response: Response | Promise<Response>): Promise<Answer> {
  const r = await response;
  return {
    status: r.status,
    replayed: r.headers.get('idempotent-replayed') === 'true',
    contentType: r.headers.get('content-type'),
    retryAfter: r.headers.get('retry-after'),
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

/**
 * Two instances of the application on one database. The lease is long (no
 * renewal falls inside a test, and it never runs out by itself): only the
 * test takes a claim away.
 */
async function startInstances(
  platform: Platform,
  db: TestDatabase,
  presenceUrl?: string,
) {
  const events: IdempotencyEvent[] = [];
  const a = await startTestApp({
    platform,
    database: db,
    imports: [lostLeaseModule('A')],
    idempotency: {
      lease: '10m',
      transactionTimeout: '10m',
      gc: false,
      onEvent: (event) => events.push(event),
      ...(presenceUrl && { presence: { url: presenceUrl } }),
    },
  });
  const b = await startTestApp({
    platform,
    database: db,
    imports: [lostLeaseModule('B')],
    idempotency: { lease: '10m', transactionTimeout: '10m', gc: false },
  });
  return { a, b, events };
}

describe.each(PLATFORMS)(
  'a claim lost while its handler runs (%s)',
  (platform) => {
    let db: TestDatabase;
    let gate: TcpGate;
    let a: TestApp;
    let b: TestApp;
    let events: IdempotencyEvent[];

    beforeAll(async () => {
      db = await createTestDatabase();
      // Instance A's presence session goes through this gate (the second test
      // holds its reconnection there); its pool connects directly.
      gate = await new TcpGate(db.url).start();
      ({ a, b, events } = await startInstances(platform, db, gate.url));
    });
    afterAll(async () => {
      a?.app.get(Gate).barrier.open();
      await a?.close();
      await b?.close();
      await gate?.stop();
      await db?.drop();
    });

    const record = async (key: string) =>
      (
        await db.query<{
          status: string;
          owner: string | null;
          owner_instance: string | null;
          leased: boolean | null;
          leased_for_minutes: boolean | null;
        }>(
          `SELECT status, owner, owner_instance,
                lease_expires_at > now() AS leased,
                lease_expires_at > now() + interval '5 minutes' AS leased_for_minutes
         FROM idempotency_records WHERE key = $1`,
          [key],
        )
      )[0];
    const orders = (reference: string) =>
      db.query<{ id: number; source: string }>(
        'SELECT id, source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      );

    /**
     * Lets R1, the stale owner held on A, go on: it writes once, and its
     * completion, fenced out, answers 503 with a `lease-lost` event.
     */
    const expectFencedOut = async (
      gateA: Gate,
      r1: Promise<Answer>,
      key: string,
    ) => {
      gateA.barrier.open();
      const late = await r1;
      gateA.hold = false;
      expect(gateA.wrote).toHaveLength(1);
      expect({ ...late, body: JSON.parse(late.text) as unknown }).toEqual({
        status: 503,
        replayed: false,
        contentType: expect.stringMatching(/^application\/problem\+json/),
        retryAfter: '1',
        text: late.text,
        body: UNAVAILABLE,
      });
      expect(
        events.filter(
          (event) => event.key === key && event.type === 'lease-lost',
        ),
      ).toEqual([expect.objectContaining({ type: 'lease-lost', key })]);
    };

    /**
     * R1 runs on A and is held after its claim; `takeAway` makes its claim
     * claimable by B; R2 (the same request on B) then executes; R1 is
     * released, writes, and must not commit.
     */
    async function loseTheLease(
      key: string,
      takeAway: (claim: { owner: string; instance: string }) => Promise<void>,
    ) {
      const reference = `ref-${key}`;
      const body = { reference };
      const gateA = a.app.get(Gate);
      const gateB = b.app.get(Gate);
      gateA.wrote.length = 0;
      gateB.wrote.length = 0;
      gateA.hold = true;
      gateA.barrier = new Barrier();
      const r1 = inFlight(answer(send(a, '/lost-lease', { key, body })));
      await gateA.barrier.reached(1);
      const claimed = await record(key);
      expect(claimed).toEqual({
        status: 'in_progress',
        owner: expect.any(String),
        owner_instance: expect.any(String),
        leased: true,
        leased_for_minutes: true,
      });

      // While A holds the claim, B refuses the duplicate.
      expect(await answer(send(b, '/lost-lease', { key, body }))).toEqual({
        status: 409,
        replayed: false,
        contentType: expect.stringMatching(/^application\/problem\+json/),
        retryAfter: '1',
        text: expect.stringContaining('urn:idempotency:request-in-progress'),
      });
      expect(gateB.wrote).toEqual([]);

      await takeAway({
        owner: claimed.owner!,
        instance: claimed.owner_instance!,
      });
      const r2 = await answer(send(b, '/lost-lease', { key, body }));
      expect(r2).toEqual({
        status: 201,
        replayed: false,
        contentType: expect.stringMatching(/^application\/json/),
        retryAfter: null,
        text: expect.any(String),
      });
      const r2Body = JSON.parse(r2.text) as { id: number };
      expect(r2Body).toEqual({
        id: expect.any(Number),
        reference,
        instance: 'B',
      });
      expect(await record(key)).toMatchObject({ status: 'completed' });
      expect((await record(key)).owner).not.toBe(claimed.owner);

      // R1 did write, in a transaction that never committed.
      await expectFencedOut(gateA, r1, key);

      // Exactly one set of rows: R2's.
      expect(await orders(reference)).toEqual([{ id: r2Body.id, source: 'B' }]);
      expect(gateA.wrote[0]).not.toBe(r2Body.id);
      expect(
        await db.query(
          `SELECT status, response_status FROM idempotency_records WHERE key = $1`,
          [key],
        ),
      ).toEqual([{ status: 'completed', response_status: 201 }]);
      // The record replays R2's answer, on either instance.
      for (const instance of [a, b]) {
        const replay = await answer(
          send(instance, '/lost-lease', { key, body }),
        );
        expect(replay).toEqual({ ...r2, replayed: true });
      }
      expect(await orders(reference)).toHaveLength(1);
      return claimed;
    }

    it('after its lease expired: the duplicate on another instance executes; the first one rolls back with 503', async () => {
      await loseTheLease('expired-1', async () => {
        await db.query(
          `UPDATE idempotency_records SET lease_expires_at = now() - interval '1 second'
         WHERE key = $1`,
          ['expired-1'],
        );
      });
    });

    it('after its lease expired, completing while the duplicate that took it over still runs: refused with 503 and rolled back; the new owner completes, and its answer is the one replayed', async () => {
      const key = 'expired-early';
      const reference = `ref-${key}`;
      const body = { reference };
      const gateA = a.app.get(Gate);
      const gateB = b.app.get(Gate);
      gateA.wrote.length = 0;
      gateB.wrote.length = 0;
      gateA.hold = true;
      gateA.barrier = new Barrier();
      gateB.hold = true;
      gateB.barrier = new Barrier();
      const requests: Promise<Answer>[] = [];
      try {
        const r1 = inFlight(answer(send(a, '/lost-lease', { key, body })));
        requests.push(r1);
        await gateA.barrier.reached(1);
        const stale = await record(key);
        await db.query(
          `UPDATE idempotency_records SET lease_expires_at = now() - interval '1 second'
         WHERE key = $1`,
          [key],
        );
        // R2 takes the key over and stays inside its handler.
        const r2Pending = inFlight(
          answer(send(b, '/lost-lease', { key, body })),
        );
        requests.push(r2Pending);
        await gateB.barrier.reached(1);
        const taken = await record(key);
        expect(taken).toMatchObject({
          status: 'in_progress',
          leased_for_minutes: true,
        });
        expect(taken.owner).not.toBe(stale.owner);

        // The stale owner writes and completes first: its completion finds
        // the key owned by R2, and its transaction rolls back.
        await expectFencedOut(gateA, r1, key);
        expect(await orders(reference)).toEqual([]);
        expect(await record(key)).toMatchObject({
          status: 'in_progress',
          owner: taken.owner,
        });
        // R2 still holds the key: a duplicate is refused, on either instance.
        for (const instance of [a, b]) {
          expect(
            (await answer(send(instance, '/lost-lease', { key, body }))).status,
          ).toBe(409);
        }

        gateB.barrier.open();
        const r2 = await r2Pending;
        gateB.hold = false;
        expect(r2).toEqual({
          status: 201,
          replayed: false,
          contentType: expect.stringMatching(/^application\/json/),
          retryAfter: null,
          text: expect.any(String),
        });
        const r2Body = JSON.parse(r2.text) as { id: number };
        expect(r2Body).toEqual({
          id: expect.any(Number),
          reference,
          instance: 'B',
        });
        // Exactly one set of rows: R2's.
        expect(await orders(reference)).toEqual([
          { id: r2Body.id, source: 'B' },
        ]);
        expect(
          await db.query(
            `SELECT status, response_status FROM idempotency_records WHERE key = $1`,
            [key],
          ),
        ).toEqual([{ status: 'completed', response_status: 201 }]);
        for (const instance of [a, b]) {
          expect(
            await answer(send(instance, '/lost-lease', { key, body })),
          ).toEqual({ ...r2, replayed: true });
        }
        expect(await orders(reference)).toHaveLength(1);
      } finally {
        gateA.hold = false;
        gateB.hold = false;
        gateA.barrier.open();
        gateB.barrier.open();
        // A failed test lets its requests end before the next test starts.
        await Promise.allSettled(requests);
      }
    });

    it("when its instance's presence session ends: another instance takes the key over at once, and the instance comes back by itself", async () => {
      let lostPid = 0;
      const claimed = await loseTheLease('presence-1', async (claim) => {
        const presence = await presenceBackend(db, claim.instance);
        expect(presence).toEqual({
          pid: expect.any(Number),
          applicationName: PRESENCE_APPLICATION_NAME,
          listening: true,
        });
        lostPid = presence!.pid;
        // A's reconnection waits at the gate until B has taken the key over.
        gate.close();
        await terminateBackend(db, lostPid);
        await gate.reached(1);
        expect(await presenceBackend(db, claim.instance)).toBeUndefined();
        // The lease itself is far from expiry: only the presence tells.
        expect(await record('presence-1')).toMatchObject({
          status: 'in_progress',
          leased_for_minutes: true,
        });
      });
      const instance = claimed.owner_instance!;

      gate.open();
      const restoredPid = await untilPresenceRestored(db, instance, lostPid);
      expect(restoredPid).not.toBe(lostPid);
      // The server shows the session back; the instance knows it once it
      // has read the answer of its LISTEN.
      const storeA = a.app.get<IdempotencyStore>(IdempotencyStore);
      await until(
        () => Promise.resolve(storeA.watching),
        'instance A to know its presence is back',
      );
      // Back in place: A's new claims name it again, and B respects them.
      const gateA = a.app.get(Gate);
      gateA.hold = true;
      gateA.barrier = new Barrier();
      const held = inFlight(
        answer(
          send(a, '/lost-lease', {
            key: 'presence-2',
            body: { reference: 'ref-presence-2' },
          }),
        ),
      );
      await gateA.barrier.reached(1);
      expect(await record('presence-2')).toMatchObject({
        status: 'in_progress',
        owner_instance: instance,
      });
      expect(
        (
          await answer(
            send(b, '/lost-lease', {
              key: 'presence-2',
              body: { reference: 'ref-presence-2' },
            }),
          )
        ).status,
      ).toBe(409);
      gateA.barrier.open();
      expect((await held).status).toBe(201);
      gateA.hold = false;
      expect(await orders('ref-presence-2')).toEqual([
        { id: expect.any(Number), source: 'A' },
      ]);
    });

    it("when its instance's presence session ends, a duplicate sent to that same instance is refused (409), never run beside the live claim: the instance asking is alive", async () => {
      const gateA = a.app.get(Gate);
      gateA.hold = true;
      gateA.barrier = new Barrier();
      const body = { reference: 'ref-presence-own' };
      const held = inFlight(
        answer(send(a, '/lost-lease', { key: 'presence-own', body })),
      );
      try {
        await gateA.barrier.reached(1);
        const instance = (await record('presence-own')).owner_instance!;
        const presence = await presenceBackend(db, instance);
        // A's reconnection waits at the gate while the duplicate comes.
        gate.close();
        await terminateBackend(db, presence!.pid);
        await gate.reached(1);
        expect(await presenceBackend(db, instance)).toBeUndefined();
        const duplicate = await answer(
          send(a, '/lost-lease', { key: 'presence-own', body }),
        );
        expect(duplicate.status).toBe(409);
        gate.open();
        gateA.barrier.open();
        expect((await held).status).toBe(201);
        expect(await orders('ref-presence-own')).toEqual([
          { id: expect.any(Number), source: 'A' },
        ]);
        await untilPresenceRestored(db, instance, presence!.pid);
      } finally {
        gate.open();
        gateA.hold = false;
        gateA.barrier.open();
        await held.catch(() => undefined);
        // A holds its presence again, on the session it keeps, before the
        // next test ends it.
        const storeA = a.app.get<IdempotencyStore>(IdempotencyStore);
        await until(
          () => Promise.resolve(storeA.watching),
          'instance A to know its presence is back',
        );
      }
    });

    it('takes every key of a gone instance over, even while another takeover of its keys is under way', async () => {
      const gateA = a.app.get(Gate);
      gateA.wrote.length = 0;
      gateA.hold = true;
      gateA.barrier = new Barrier();
      const keys = ['gone-1', 'gone-2'];
      const firsts = keys.map((key) =>
        inFlight(
          answer(
            send(a, '/lost-lease', { key, body: { reference: `ref-${key}` } }),
          ),
        ),
      );
      await gateA.barrier.reached(2);
      const instance = (await record('gone-1')).owner_instance!;
      expect((await record('gone-2')).owner_instance).toBe(instance);

      // The takeover of gone-1 stops inside its statement, after its
      // WHERE clause, at a lock of the test (a trigger of the test waits
      // for it): that takeover's transaction stays open meanwhile.
      await db.query(`
        CREATE FUNCTION test_hold_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_advisory_xact_lock_shared(${TAKEOVER_GATE});
          RETURN NEW;
        END $$`);
      await db.query(`
        CREATE TRIGGER test_hold_takeover AFTER UPDATE OF owner
        ON idempotency_records FOR EACH ROW
        WHEN (NEW.key = 'gone-1' AND NEW.status = 'in_progress')
        EXECUTE FUNCTION test_hold_takeover()`);
      const takeoverGate = await holdInTransaction(
        db.url,
        `SELECT pg_advisory_xact_lock(${TAKEOVER_GATE})`,
      );
      try {
        const presence = await presenceBackend(db, instance);
        gate.close();
        await terminateBackend(db, presence!.pid);
        await gate.reached(1);

        const first = inFlight(
          answer(
            send(b, '/lost-lease', {
              key: 'gone-1',
              body: { reference: 'ref-gone-1' },
            }),
          ),
        );
        await untilAdvisoryLocks(db, 'waiting', 1);
        // The instance is gone whatever the other takeover holds.
        const second = await answer(
          send(b, '/lost-lease', {
            key: 'gone-2',
            body: { reference: 'ref-gone-2' },
          }),
        );
        expect({ key: 'gone-2', status: second.status }).toEqual({
          key: 'gone-2',
          status: 201,
        });
        await takeoverGate.release();
        expect({ key: 'gone-1', status: (await first).status }).toEqual({
          key: 'gone-1',
          status: 201,
        });
      } finally {
        await takeoverGate.release();
        await db.query(
          'DROP TRIGGER test_hold_takeover ON idempotency_records',
        );
        await db.query('DROP FUNCTION test_hold_takeover()');
        gate.open();
      }
      gateA.barrier.open();
      gateA.hold = false;
      expect((await Promise.all(firsts)).map((r) => r.status)).toEqual([
        503, 503,
      ]);
      for (const key of keys) {
        expect(await orders(`ref-${key}`)).toEqual([
          { id: expect.any(Number), source: 'B' },
        ]);
      }
      await untilPresenceRestored(db, instance, 0);
    });
  },
);
