import type { IdempotencyModuleOptions } from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { CapturedLogger } from './captured-logger.js';
import {
  Gate,
  keyHash as hash,
  TelemetryTestModule,
  USER_HEADER,
  userScope as scope,
} from './telemetry.module.js';

const USER = 'user-7f3a';

/** A line of the module, its duration (which varies) left out. */
const withoutDuration = (line: string) =>
  line.replace(/ duration_ms=\d+/, ' duration_ms=…');

/**
 * Each `telemetry` setting, and how the module's log lines then show a key
 * `key` of scope `USER`: as logfmt fields, and in a sentence.
 */
const SETTINGS: Array<
  [
    string,
    IdempotencyModuleOptions['telemetry'],
    (key: string) => { fields: string; phrase: string },
  ]
> = [
  [
    'by default: its hash',
    undefined,
    (key) => ({
      fields: ` key_hash=${hash(key)}`,
      phrase: `key with hash ${hash(key)}`,
    }),
  ],
  [
    'with telemetry off: its hash still',
    false,
    (key) => ({
      fields: ` key_hash=${hash(key)}`,
      phrase: `key with hash ${hash(key)}`,
    }),
  ],
  [
    "with keys: 'raw': the key and its scope",
    { keys: 'raw' },
    (key) => ({
      fields: ` scope="${USER}" key="${key}"`,
      phrase: `key "${key}"`,
    }),
  ],
  [
    "with keys: 'none': neither",
    { keys: 'none' },
    () => ({ fields: '', phrase: 'the key' }),
  ],
];

describe.each(PLATFORMS)('Keys in log lines (%s)', (platform) => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it.each(SETTINGS)(
    'shows a key as telemetry would, %s',
    async (_, telemetry, shown) => {
      const logger = new CapturedLogger();
      target = await startTestApp({
        platform,
        imports: [TelemetryTestModule],
        idempotency: {
          gc: false,
          scope,
          telemetry,
          // Over the `orders` route's answer, within the `held` route's.
          maxResponseSize: 32,
        },
        configure: (app) => app.useLogger(logger),
      });
      const gate = target.app.get(Gate);
      gate.barrier = new Barrier();
      const app = target;
      const post = async (path: string, key: string, reference: string) =>
        (
          await send(app, path, {
            key,
            body: { reference },
            headers: { [USER_HEADER]: USER },
          })
        ).status;
      logger.clear();

      const label = JSON.stringify(telemetry ?? 'default').replace(/\W/g, '');
      const held = `held:${platform}:${label}`;
      const first = post('/telemetry/held', held, 'r');
      await Promise.race([
        gate.barrier.reached(1),
        first.then((status) => {
          throw new Error(`Answered ${status} before reaching the barrier`);
        }),
      ]);
      expect(await post('/telemetry/held', held, 'r')).toBe(409);
      gate.barrier.open();
      expect(await first).toBe(201);
      expect(await post('/telemetry/held', held, 'other')).toBe(422);
      const large = `large:${platform}:${label}`;
      expect(await post('/telemetry/orders', large, 'r')).toBe(201);

      const { fields } = shown(held);
      const route = 'method=POST path="/telemetry/held"';
      expect(logger.of('Idempotency').map(withoutDuration)).toEqual([
        `debug event=conflict ${route} status=409${fields} duration_ms=…`,
        `debug event=executed ${route} status=201${fields} duration_ms=…`,
        `debug event=mismatch ${route} status=422${fields} duration_ms=…`,
        `warn Response of POST /telemetry/orders (66 bytes) exceeds maxResponseSize (32): ${shown(large).phrase} is not replayable`,
        `debug event=executed method=POST path="/telemetry/orders" status=201${shown(large).fields} duration_ms=…`,
      ]);
    },
  );
});
