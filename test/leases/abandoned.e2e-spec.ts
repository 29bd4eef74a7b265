import {
  IdempotencyCollector,
  type IdempotencyEvent,
} from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { until } from '../utils/barrier.js';
import { AbandonedTestModule, Runs } from './abandoned.module.js';

describe.each(PLATFORMS)(
  'recovery points of a request that never completed (%s)',
  (platform) => {
    let target: TestApp;
    const events: IdempotencyEvent[] = [];

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [AbandonedTestModule],
        idempotency: { gc: false, onEvent: (event) => events.push(event) },
      });
    });
    afterAll(() => target.close());

    const steps = () =>
      target.db.query<{ key: string; step: string }>(
        'SELECT key, step FROM idempotency_steps ORDER BY key, step',
      );

    it('are reported by the collection in an abandoned event, with their results, then deleted', async () => {
      const failed = await send(target, '/abandoned', {
        key: 'abandoned-1',
        body: { reference: 'r-1', amount: 1250 },
      });
      expect(failed.status).toBe(500);
      expect(target.app.get(Runs).count).toBe(1);
      // The claim was released at the failure; the charge step stays, and
      // the record, without an owner, keeps the key bound to the request.
      const record = () =>
        target.db.query(
          `SELECT status, owner FROM idempotency_records WHERE key = 'abandoned-1'`,
        );
      expect(await record()).toEqual([{ status: 'in_progress', owner: null }]);
      expect(await steps()).toEqual([{ key: 'abandoned-1', step: 'charge' }]);

      // While the key is bound (until ttl after the attempt's deadline),
      // its retry may still come and resume: the step is kept.
      events.length = 0;
      await target.app.get(IdempotencyCollector).collect();
      expect(events.map((event) => event.type)).toEqual(['gc']);
      expect(await steps()).toEqual([{ key: 'abandoned-1', step: 'charge' }]);

      await until(
        async () =>
          (
            await target.db.query<{ over: boolean }>(
              `SELECT expires_at < now() AND lease_expires_at < now() AS over
                 FROM idempotency_records WHERE key = 'abandoned-1'`,
            )
          )[0].over,
        "the key's binding to end",
      );
      events.length = 0;
      await target.app.get(IdempotencyCollector).collect();
      expect(events).toEqual([
        {
          type: 'abandoned',
          scope: 'global',
          key: 'abandoned-1',
          steps: [{ step: 'charge', result: { id: 'ch_r-1', amount: 1250 } }],
        },
        expect.objectContaining({ type: 'gc' }),
      ]);
      expect(await steps()).toEqual([]);

      // Reported once: nothing is left to report.
      events.length = 0;
      await target.app.get(IdempotencyCollector).collect();
      expect(events.map((event) => event.type)).toEqual(['gc']);
    });
  },
);
