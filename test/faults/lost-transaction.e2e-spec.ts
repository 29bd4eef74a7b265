import { until, untilAdvisoryLocks } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { LostTransactionTestModule, Pause } from './lost-transaction.module.js';

describe.each(PLATFORMS)(
  'a handler whose session PostgreSQL ended (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [LostTransactionTestModule],
        // Room for one transaction of the module: the retry runs only once
        // the lost transaction has handed its place back.
        typeorm: { poolSize: 2 },
      });
    });
    afterAll(() => target?.close());

    const orders = () =>
      target.db.query<{ source: string }>(
        `SELECT source FROM orders WHERE reference = 'late' ORDER BY id`,
      );

    it('writes nothing after its transaction is gone, answers 503, and its retry executes once', async () => {
      const pause = target.app.get(Pause);
      const late = send(target, '/late', {
        key: 'late-1',
        body: { reference: 'late' },
      });
      await pause.barrier.reached(1);
      // Idle in its transaction past the timeout: PostgreSQL ends the session,
      // which frees the key's locks.
      await untilAdvisoryLocks(target.db, 'held', 0);
      // The app saw its connection break while idle: TypeORM released the
      // query runner before the handler's next statement.
      await until(
        async () => pause.queryRunner?.isReleased === true,
        'TypeORM to release the lost connection',
      );
      // Meanwhile a request waits for the only place, which the handler
      // holds however long it takes: it gets a 503 after transactionTimeout.
      const waiting = await send(target, '/late', {
        key: 'late-waiting',
        body: { reference: 'waiting' },
      });
      pause.barrier.open();
      const failed = await late;
      const afterFailure = await orders();
      const problem = (await failed.json()) as { type: string };

      const retry = await send(target, '/late', {
        key: 'late-1',
        body: { reference: 'late' },
      });
      const afterRetry = await orders();
      console.log(
        `lost transaction (${platform}): first attempt ${failed.status} ${problem.type}, ` +
          `${afterFailure.length} orders after it; retry ${retry.status}, ${afterRetry.length} orders`,
      );
      // Its second write neither ran in a new transaction of its own nor
      // committed without the record.
      expect(afterFailure).toEqual([]);
      expect(failed.status).toBe(503);
      expect(failed.headers.get('content-type')).toMatch(
        /^application\/problem\+json/,
      );
      expect(problem.type).toBe('urn:idempotency:unavailable');
      expect({
        status: waiting.status,
        retryAfter: waiting.headers.get('retry-after'),
        type: ((await waiting.json()) as { type: string }).type,
      }).toEqual({
        status: 503,
        retryAfter: '1',
        type: 'urn:idempotency:unavailable',
      });
      expect(retry.status).toBe(201);
      expect(await retry.json()).toEqual({ run: 2 });
      expect(afterRetry).toEqual([{ source: 'first' }, { source: 'second' }]);
    });
  },
);
