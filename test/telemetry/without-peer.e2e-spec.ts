import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertBuilt } from '../utils/library-build.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/*
 * The compiled library in an application process of its own, whose module
 * resolution hooks (test/utils/hidden-packages.js) log every `@opentelemetry/*` package
 * asked for, and can make them unresolvable as if they were not installed.
 *
 * Needs `npm run build` first (`npm test` builds before it runs jest).
 */

const ENTRY = {
  entry: '../test/utils/hidden-packages.js',
  ready: /listening: (http:\/\/\S+)/,
};

describe('the module without OpenTelemetry', () => {
  let scratch: string;

  beforeAll(async () => {
    await assertBuilt();
    scratch = await mkdtemp(join(tmpdir(), 'nestjs-idempotency-telemetry-'));
  });
  afterAll(async () => {
    if (scratch) {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  describe.each<{
    case: string;
    env: Record<string, string>;
    asked: string[];
  }>([
    {
      case: '@opentelemetry/api not installed',
      env: {},
      // The module looks for it once, at startup, and does without.
      asked: ['@opentelemetry/api'],
    },
    {
      case: 'installed, with telemetry: false',
      env: { HIDE: '0', TELEMETRY: 'off' },
      asked: [],
    },
  ])('$case', ({ env, asked }) => {
    let db: TestDatabase;
    let app: SampleProcess | undefined;
    let log: string;

    beforeAll(async () => {
      db = await createTestDatabase();
      log = join(scratch, `${Object.keys(env).join('-') || 'hidden'}.log`);
      await writeFile(log, '');
      app = await startSample(
        {
          ...env,
          DATABASE_URL: db.url,
          PEER_LOG: log,
          HIDDEN_PACKAGES: '^@opentelemetry/',
          HIDDEN_APP: 'test/telemetry/peerless-app.js',
        },
        ENTRY,
      );
    }, 30_000);
    afterAll(async () => {
      await app?.stop();
      await db?.drop();
    }, 30_000);

    it('executes a request once and replays it for its duplicate', async () => {
      const post = () =>
        fetch(`${app!.url}/payments`, {
          method: 'POST',
          headers: {
            'Content-Type': 'application/json',
            'Idempotency-Key': 'otel-absent',
          },
          body: JSON.stringify({ reference: 'p-1' }),
        });
      const first = await post();
      const body = await first.text();
      expect(first.status).toBe(201);
      expect(JSON.parse(body)).toEqual({
        id: 1,
        reference: 'p-1',
        receipt: expect.any(String),
      });
      const second = await post();
      expect(second.status).toBe(201);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(await second.text()).toBe(body);
      expect(await db.query('SELECT reference FROM payments')).toEqual([
        { reference: 'p-1' },
      ]);
      expect(
        await db.query('SELECT key, status FROM idempotency_records'),
      ).toEqual([{ key: 'otel-absent', status: 'completed' }]);
    });

    it('loads no OpenTelemetry package, and says nothing of it', async () => {
      expect((await readFile(log, 'utf8')).split('\n').filter(Boolean)).toEqual(
        asked,
      );
      expect(app!.output()).toContain('cjs: []\n');
      // Nothing logged at error or warn level, nothing of OpenTelemetry.
      expect(app!.output()).not.toMatch(/\b(ERROR|WARN) \[/);
      expect(app!.output()).not.toMatch(/opentelemetry/i);
    });
  });
});
