import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  HANDLER_WAIT_MS,
  SlowHandlersTestModule,
} from './slow-handlers.module.js';

const REQUESTS = 100;
const POOL_SIZE = 10;

describe.each(PLATFORMS)('slow handlers on a small pool (%s)', (platform) => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [SlowHandlersTestModule],
      typeorm: { extra: { max: POOL_SIZE } },
      idempotency: { gc: false },
    });
  });
  afterAll(() => target.close());

  it(`run ${REQUESTS} handlers that wait ${HANDLER_WAIT_MS} ms at once on ${POOL_SIZE} connections: every request commits`, async () => {
    const keys = Array.from({ length: REQUESTS }, (_, i) => `slow-${i}`);
    const started = performance.now();
    const responses = await Promise.all(
      keys.map((key) =>
        send(target, '/slow-handlers', {
          key,
          body: { reference: `ref-${key}` },
        }),
      ),
    );
    const wallMs = performance.now() - started;
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
    expect(
      await target.db.query(
        `SELECT count(*)::int AS orders, count(DISTINCT reference)::int AS "references"
           FROM orders WHERE reference LIKE 'ref-slow-%'`,
      ),
    ).toEqual([{ orders: REQUESTS, references: REQUESTS }]);
    expect(
      await target.db.query(
        `SELECT status, count(*)::int AS records FROM idempotency_records
           GROUP BY status`,
      ),
    ).toEqual([{ status: 'completed', records: REQUESTS }]);
    console.log(
      `slow handlers (${platform}): ${REQUESTS} requests, each waiting ${HANDLER_WAIT_MS} ms before its write, ` +
        `on a pool of ${POOL_SIZE} connections: all 201 in ${Math.round(wallMs)} ms wall time`,
    );
  });
});
