import { Barrier } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { CapturedLogger } from './captured-logger.js';
import { Gate, TelemetryTestModule } from './telemetry.module.js';

/** The levels a production application logs. */
const PRODUCTION_LEVELS = new Set(['log', 'warn', 'error', 'fatal']);

describe.each(PLATFORMS)('Log levels of refusals (%s)', (platform) => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it('logs a 409, a 422, a 400 for a bad key, an unreplayable duplicate and a stored error at debug level only: nothing at log, warn or error', async () => {
    const logger = new CapturedLogger();
    target = await startTestApp({
      platform,
      imports: [TelemetryTestModule],
      idempotency: {
        gc: false,
        storeErrors: true,
        // Under the `orders` route's answer (66 bytes), over the `declined`
        // route's (44 bytes).
        maxResponseSize: 56,
      },
      configure: (app) => app.useLogger(logger),
    });
    const app = target;
    const gate = app.app.get(Gate);
    gate.barrier = new Barrier();
    const post = async (path: string, key: string | undefined, body: object) =>
      (await send(app, path, { key, body })).status;
    // Its first answer is over maxResponseSize: warned once, as a setting to fix.
    expect(await post('/telemetry/orders', 'large', { reference: 'l' })).toBe(
      201,
    );
    logger.clear();

    const first = post('/telemetry/held', 'held', { reference: 'r' });
    await Promise.race([
      gate.barrier.reached(1),
      first.then((status) => {
        throw new Error(`Answered ${status} before reaching the barrier`);
      }),
    ]);
    expect(await post('/telemetry/held', 'held', { reference: 'r' })).toBe(409);
    gate.barrier.open();
    expect(await first).toBe(201);
    expect(await post('/telemetry/held', 'held', { reference: 'other' })).toBe(
      422,
    );
    expect(await post('/telemetry/held', undefined, { reference: 'r' })).toBe(
      400,
    );
    expect(
      await post('/telemetry/held', 'x'.repeat(256), { reference: 'r' }),
    ).toBe(400);
    expect(await post('/telemetry/held', 'has space', { reference: 'r' })).toBe(
      400,
    );
    expect(await post('/telemetry/orders', 'large', { reference: 'l' })).toBe(
      201,
    );
    expect(
      await post('/telemetry/declined', 'declined', { reference: 'd' }),
    ).toBe(402);
    expect(
      await post('/telemetry/declined', 'declined', { reference: 'd' }),
    ).toBe(402);

    expect(
      logger.lines.filter(({ level }) => PRODUCTION_LEVELS.has(level)),
    ).toEqual([]);
    const events = logger
      .of('Idempotency')
      .map((line) => /^(\w+) event=([\w-]+)/.exec(line)?.slice(1).join(' '));
    expect(events).toEqual([
      'debug conflict',
      'debug executed',
      'debug mismatch',
      'debug not-replayable',
      'debug stored-error',
      'debug replayed',
    ]);
  });
});
