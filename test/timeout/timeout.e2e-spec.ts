import {
  IDEMPOTENCY_TABLE_NAME,
  type IdempotencyEvent,
} from '../../src/index.js';
import { untilAdvisoryLocks } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Hang, TimeoutTestModule } from './timeout.module.js';

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
  afterAll(() => target.close());

  it('is aborted by PostgreSQL after the transaction timeout: the key is free and nothing partial remains', async () => {
    const hang = target.app.get(Hang);
    const hung = send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    await hang.barrier.reached(1);
    // The server ends the hung transaction by itself, which frees the key's lock.
    await untilAdvisoryLocks(target.db, 'held', 0);

    const retry = await send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });

    hang.barrier.open();
    const late = await hung;
    expect(late.status).toBe(503);
    expect(events.filter((event) => event.type === 'timeout')).toEqual([
      expect.objectContaining({ key: 'hung-1', method: 'POST', path: '/slow' }),
    ]);
    expect(late.headers.get('content-type')).toBe('application/problem+json');
    expect(((await late.json()) as { type: string }).type).toBe(
      'urn:idempotency:unavailable',
    );

    const rows = await target.db.query<{ source: string }>(
      `SELECT source FROM orders WHERE reference = 'slow'`,
    );
    expect(rows).toEqual([{ source: 'run-2' }]);
    const [record] = await target.db.query<{ response_body: Buffer }>(
      `SELECT response_body FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'hung-1'`,
    );
    expect(JSON.parse(record.response_body.toString())).toEqual({ run: 2 });

    const replay = await send(target, '/slow', {
      key: 'hung-1',
      body: { reference: 'slow' },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({ run: 2 });
  });

  it('rolls back when the client leaves before the response: nothing stays, the retry runs', async () => {
    const hang = target.app.get(Hang);
    const client = new AbortController();
    const request = send(target, '/slow/abandoned', {
      key: 'gone-1',
      body: { reference: 'gone' },
      signal: client.signal,
    });
    await hang.left.reached(1);
    client.abort();
    await expect(request).rejects.toThrow();
    await hang.clientGone.reached(1);
    hang.left.open();
    await untilAdvisoryLocks(target.db, 'held', 0);
    expect(
      await target.db.query(`SELECT 1 FROM orders WHERE reference = 'gone'`),
    ).toHaveLength(0);
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'gone-1'`,
      ),
    ).toHaveLength(0);

    const retry = await send(target, '/slow/abandoned', {
      key: 'gone-1',
      body: { reference: 'gone' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
  });

  it('answers 503 when the server cancels a statement of the handler: nothing stays, not even with a policy that stores every error, and the retry runs', async () => {
    const cancelled = await send(target, '/slow/cancelled', {
      key: 'cancelled-1',
      body: { reference: 'cancelled' },
    });
    expect(cancelled.status).toBe(503);
    expect(cancelled.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(cancelled.headers.get('retry-after')).toBe('1');
    expect(((await cancelled.json()) as { type: string }).type).toBe(
      'urn:idempotency:unavailable',
    );
    expect(
      events.filter(
        (event) => event.type === 'timeout' && event.key === 'cancelled-1',
      ),
    ).toHaveLength(1);
    expect(
      await target.db.query(
        `SELECT 1 FROM orders WHERE reference = 'cancelled'
         UNION ALL SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'cancelled-1'`,
      ),
    ).toHaveLength(0);

    const retry = await send(target, '/slow/cancelled', {
      key: 'cancelled-1',
      body: { reference: 'cancelled' },
    });
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ run: 2 });
    expect(
      await target.db.query(
        `SELECT source FROM orders WHERE reference = 'cancelled'`,
      ),
    ).toEqual([{ source: 'run-2' }]);
  });
});
