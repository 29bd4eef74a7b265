import { until } from '../utils/barrier.js';
import { lockWaiters } from '../utils/sessions.js';
import {
  busyConnections,
  logStatements,
  poolOf,
} from '../utils/statement-counter.js';
import { holdInTransaction } from '../utils/test-database.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Gate, NoConnectionTestModule } from './no-connection.module.js';

const REQUESTS = 50;

describe.each(PLATFORMS)(
  'handlers waiting before their first statement (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [NoConnectionTestModule],
        idempotency: { gc: false },
      });
    });
    afterAll(() => target.close());

    it(`hold no connection and no transaction: ${REQUESTS} claimed keys wait with the pool idle, then all commit`, async () => {
      const gate = target.app.get(Gate);
      const keys = Array.from({ length: REQUESTS }, (_, i) => `idle-${i}`);
      const answers = keys.map((key) =>
        send(target, '/no-connection', {
          key,
          body: { reference: `ref-${key}` },
        }),
      );
      await gate.barrier.reached(REQUESTS);

      // Every key is claimed: one committed row each, leased to its attempt.
      expect(
        await target.db.query(
          `SELECT count(*)::int AS claimed, count(DISTINCT owner)::int AS owners
           FROM idempotency_records
           WHERE status = 'in_progress' AND lease_expires_at > now()`,
        ),
      ).toEqual([{ claimed: REQUESTS, owners: REQUESTS }]);
      // No session of the database (the test's own aside) is inside a transaction.
      expect(
        await target.db.query(
          `SELECT pid, application_name, state FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND state LIKE 'idle in transaction%'`,
        ),
      ).toEqual([]);
      // The module holds no connection of the application's pool.
      const pool = poolOf(target.dataSource);
      expect({
        lent: busyConnections(target.dataSource),
        waitingForOne: pool.waitingCount,
      }).toEqual({ lent: 0, waitingForOne: 0 });

      gate.barrier.open();
      const responses = await Promise.all(answers);
      const results = await Promise.all(
        responses.map(async (response, i) => ({
          key: keys[i],
          status: response.status,
          body: (await response.json()) as unknown,
        })),
      );
      expect(results).toEqual(
        keys.map((key) => ({
          key,
          status: 201,
          body: { id: expect.any(Number), reference: `ref-${key}` },
        })),
      );
      // One row per request, the very rows the answers name.
      const rows = await target.db.query<{ id: number; reference: string }>(
        `SELECT id, reference FROM orders WHERE reference LIKE 'ref-idle-%' ORDER BY id`,
      );
      expect(rows).toHaveLength(REQUESTS);
      expect(rows).toEqual(
        results
          .map(({ body }) => body as { id: number; reference: string })
          .sort((a, b) => a.id - b.id),
      );
      expect(
        await target.db.query(
          `SELECT status, count(*)::int AS records FROM idempotency_records
           WHERE key LIKE 'idle-%' GROUP BY status`,
        ),
      ).toEqual([{ status: 'completed', records: REQUESTS }]);
      expect(busyConnections(target.dataSource)).toBe(0);
    });
  },
);

describe('renewals behind a record that another session locks', () => {
  const POOL_SIZE = 6;
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [NoConnectionTestModule],
      typeorm: { poolSize: POOL_SIZE },
      // A renewal every 100 ms, each given a second.
      idempotency: { gc: false, lease: '300ms' },
    });
  });
  afterAll(() => target.close());

  it(`hold no more than one or two connections while the lock lasts, however many turns pass: the pool of ${POOL_SIZE} stays free, then the request commits`, async () => {
    const gate = target.app.get(Gate);
    const answer = send(target, '/no-connection', {
      key: 'locked-1',
      body: { reference: 'ref-locked-1' },
    });
    await gate.barrier.reached(1);
    // An operator's session, or a completion whose COMMIT is slow.
    const lock = await holdInTransaction(
      target.db.url,
      `SELECT 1 FROM idempotency_records WHERE key = 'locked-1' FOR UPDATE`,
    );
    try {
      const log = logStatements(target.dataSource);
      const renewals = () =>
        log.statements.filter((text) => text.includes('idempotency_renew'))
          .length;
      // As many renewals as the pool has connections, each behind the lock.
      await until(
        () => Promise.resolve(renewals() >= POOL_SIZE),
        `${POOL_SIZE} renewals`,
      );
      log.stop();
      // Each gave up on the lock before the next was sent: one waits at
      // most (two as one turn follows another).
      expect(
        (await lockWaiters(target.db, 'idempotency_records')).length,
      ).toBeLessThanOrEqual(2);
      expect(busyConnections(target.dataSource)).toBeLessThanOrEqual(2);
      expect(poolOf(target.dataSource).waitingCount).toBe(0);
    } finally {
      await lock.release();
    }
    gate.barrier.open();
    const response = await answer;
    expect(response.status).toBe(201);
    expect(
      await target.db.query(
        `SELECT status FROM idempotency_records WHERE key = 'locked-1'`,
      ),
    ).toEqual([{ status: 'completed' }]);
  }, 30_000);
});
