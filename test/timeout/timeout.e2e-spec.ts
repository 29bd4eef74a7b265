import type { IdempotencyEvent } from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Barrier, until } from '../utils/barrier.js';
import { holdInTransaction, type HeldLocks } from '../utils/test-database.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Hang, LOCKED, TimeoutTestModule } from './timeout.module.js';

describe.each(PLATFORMS)('a hung handler (%s)', (platform) => {
  let target: TestApp;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    target = await startTestApp({
      imports: [TimeoutTestModule],
      platform,
      idempotency: { onEvent: (event) => events.push(event) },
    });
  });
  // Released by its test, or here should the test fail while it holds it.
  let recordLock: HeldLocks | undefined;
  afterAll(async () => {
    await recordLock?.release();
    await target.close();
  });

  const record = (key: string) =>
    target.db.query<{ status: string }>(
      `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );
  const problem = async (response: Response) => ({
    status: response.status,
    contentType: response.headers.get('content-type'),
    retryAfter: response.headers.get('retry-after'),
    type: ((await response.json()) as { type: string }).type,
  });
  const UNAVAILABLE = {
    status: 503,
    contentType: expect.stringMatching(/^application\/problem\+json/),
    retryAfter: '1',
    type: 'urn:idempotency:unavailable',
  };

  it('is abandoned by the module at its transactionTimeout: 503, the key is claimable again at once, and its late writes never commit', async () => {
    const hang = target.app.get(Hang);
    const hung = send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    await hang.barrier.reached(1);
    // Answered at the deadline, while the handler is still held.
    expect(await problem(await hung)).toEqual(UNAVAILABLE);
    expect(events.filter((event) => event.type === 'timeout')).toEqual([
      expect.objectContaining({ key: 'hung-1', method: 'POST', path: '/slow' }),
    ]);
    // Its claim was released before the answer, and its write rolled back.
    expect(await record('hung-1')).toEqual([]);
    expect(
      await target.db.query(`SELECT 1 FROM orders WHERE reference = 'slow'`),
    ).toEqual([]);

    const retry = await send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });

    // The abandoned handler goes on: its next write fails.
    hang.barrier.open();
    await hang.lateWrite.reached(1);
    hang.lateWrite.open();
    expect(hang.lateError).toBeInstanceOf(Error);

    const rows = await target.db.query<{ source: string }>(
      `SELECT source FROM orders WHERE reference = 'slow'`,
    );
    expect(rows).toEqual([{ source: 'run-2' }]);
    const [stored] = await target.db.query<{ response_body: Buffer }>(
      `SELECT response_body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'hung-1'`,
    );
    expect(JSON.parse(stored.response_body.toString())).toEqual({ run: 2 });

    const replay = await send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({ run: 2 });
  });

  it('cancels the statement the handler runs at its deadline: 503, the statement is gone from the server, nothing stays, and the retry runs', async () => {
    const hang = target.app.get(Hang);
    const sleeping = await send(target, '/slow/sleep', {
      key: 'sleep-1',
      body: { reference: 'sleep' },
    });
    expect(await problem(sleeping)).toEqual(UNAVAILABLE);
    // Cancelled, not left running until its end (30 s).
    await hang.sleepEnded.reached(1);
    hang.sleepEnded.open();
    expect(hang.sleepError).toMatchObject({ driverError: { code: '57014' } });
    expect(
      await target.db.query(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE '%pg_sleep(30)%'
           AND state = 'active' AND pid <> pg_backend_pid()`,
      ),
    ).toEqual([]);
    expect(
      await target.db.query(
        `SELECT 1 FROM orders WHERE reference = 'sleep'
         UNION ALL SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'sleep-1'`,
      ),
    ).toEqual([]);
    expect(
      events.filter(
        (event) => event.type === 'timeout' && event.key === 'sleep-1',
      ),
    ).toHaveLength(1);

    const retry = await send(target, '/slow/sleep', {
      key: 'sleep-1',
      body: { reference: 'sleep' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(
      await target.db.query(
        `SELECT source FROM orders WHERE reference = 'sleep'`,
      ),
    ).toEqual([{ source: 'run-2' }]);
  });

  it("abandons the completion at the deadline when it waits on a lock of the key's record: 503 while the lock is held, nothing committed, the key free once the lock goes", async () => {
    const hang = target.app.get(Hang);
    const key = 'completion-1';
    const request = send(target, '/slow/completion', {
      key,
      body: { reference: 'completion' },
    });
    await hang.returning.reached(1);
    // Another session locks the record: the completion, in the handler's
    // transaction, waits on it, past the deadline (1 s).
    recordLock = await holdInTransaction(
      target.db.url,
      `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1 FOR UPDATE`,
      [key],
    );
    hang.returning.open();
    // Answered while the lock is still held.
    expect(await problem(await request)).toEqual(UNAVAILABLE);
    expect(
      events.filter((event) => event.type === 'timeout' && event.key === key),
    ).toHaveLength(1);
    // Rolled back: its order is gone, and its connection is back in the
    // pool, out of its transaction.
    expect(
      await target.db.query(
        `SELECT 1 FROM orders WHERE reference = 'completion'`,
      ),
    ).toEqual([]);
    expect(
      await target.db.query(
        `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND query LIKE '%idempotency_records%' AND wait_event_type = 'Lock'
           AND query NOT LIKE '%idempotency_release%'`,
      ),
    ).toEqual([]);
    await recordLock.release();
    // Its release, tried again, lands once the lock is gone.
    await until(
      async () => (await record(key)).length === 0,
      'the claim to be released',
    );

    const retry = await send(target, '/slow/completion', {
      key,
      body: { reference: 'completion' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(
      await target.db.query(
        `SELECT source FROM orders WHERE reference = 'completion'`,
      ),
    ).toEqual([{ source: 'run-2' }]);
  }, 20_000);

  it.each([
    ['a body', ''],
    ['a stream', '?as=stream'],
  ])(
    'rolls back when the client leaves before the response (%s): nothing stays, the retry runs',
    async (_, query) => {
      const hang = target.app.get(Hang);
      hang.left = new Barrier();
      hang.clientGone = new Barrier();
      const key = `gone-${query}`;
      const reference = `gone${query}`;
      const client = new AbortController();
      const request = send(target, `/slow/abandoned${query}`, {
        key,
        body: { reference },
        signal: client.signal,
      });
      await hang.left.reached(1);
      client.abort();
      await expect(request).rejects.toThrow();
      await hang.clientGone.reached(1);
      hang.left.open();
      // Rolled back, then released: once the claim is gone, both are done.
      await until(
        async () => (await record(key)).length === 0,
        'the claim to be released',
      );
      expect(
        await target.db.query(`SELECT 1 FROM orders WHERE reference = $1`, [
          reference,
        ]),
      ).toHaveLength(0);

      const retry = await send(target, `/slow/abandoned${query}`, {
        key,
        body: { reference },
      });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(await retry.json()).toEqual({ run: 2 });
    },
  );

  it.each([
    [
      'cancels a statement of the handler (its own statement_timeout)',
      'cancelled',
    ],
    [
      'gives up on a lock of the handler (its own lock_timeout)',
      'lock-timeout',
    ],
  ] as const)(
    'answers 503 when the server %s: nothing stays, not even with a policy that stores every error, and the retry runs',
    async (_what, route) => {
      const key = `${route}-1`;
      if (route === 'lock-timeout') {
        await target.db.query('SELECT pg_advisory_lock($1)', [LOCKED]);
      }
      const cancelled = await send(target, `/slow/${route}`, {
        key,
        body: { reference: route },
      }).finally(() =>
        route === 'lock-timeout'
          ? target.db.query('SELECT pg_advisory_unlock($1)', [LOCKED])
          : undefined,
      );
      expect(cancelled.status).toBe(503);
      expect(cancelled.headers.get('content-type')).toMatch(
        /^application\/problem\+json/,
      );
      expect(cancelled.headers.get('retry-after')).toBe('1');
      expect(((await cancelled.json()) as { type: string }).type).toBe(
        'urn:idempotency:unavailable',
      );
      expect(
        events.filter((event) => event.type === 'timeout' && event.key === key),
      ).toHaveLength(1);
      expect(
        await target.db.query(
          `SELECT 1 FROM orders WHERE reference = $1
         UNION ALL SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $2`,
          [route, key],
        ),
      ).toHaveLength(0);

      const retry = await send(target, `/slow/${route}`, {
        key,
        body: { reference: route },
      });
      expect(retry.status).toBe(201);
      expect(await retry.json()).toEqual({ run: 2 });
      expect(
        await target.db.query(
          `SELECT source FROM orders WHERE reference = $1`,
          [route],
        ),
      ).toEqual([{ source: 'run-2' }]);
    },
  );
});
