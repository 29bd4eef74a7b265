import { SchedulerRegistry } from '@nestjs/schedule';
import { IdempotencyCollector } from '../../src/index.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';

/**
 * `@nestjs/schedule` clears its whole registry in its own shutdown hook, and
 * Nest may call that hook before the collector's: the collector must then
 * find its job gone, not fail (which Nest logs as an error at every
 * graceful shutdown, and which skipped waiting for a running collection).
 */
describe.each([
  ['interval', { interval: '5m' }],
  ['cron', { cron: '0 * * * *' }],
] as const)('GC scheduled on an %s, at shutdown', (type, gc) => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({ idempotency: { gc } });
  });
  afterAll(async () => {
    await target.close();
  });

  it('stops when the scheduler has already removed its job', async () => {
    const scheduler = target.app.get(SchedulerRegistry);
    expect(scheduler.doesExist(type, 'idempotency-gc')).toBe(true);
    // What the scheduler's own shutdown hook does when it runs first.
    if (type === 'cron') {
      scheduler.deleteCronJob('idempotency-gc');
    } else {
      scheduler.deleteInterval('idempotency-gc');
    }

    await expect(
      target.app.get(IdempotencyCollector).beforeApplicationShutdown(),
    ).resolves.toBeUndefined();
    console.log(`gc ${type}: shutdown hook resolved after the job was removed`);
  });
});
