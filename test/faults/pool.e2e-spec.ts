import { until } from '../utils/barrier.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Gates, poolModule } from './pool.module.js';

const POOL_SIZE = 4;
const REQUESTS = 2 * POOL_SIZE;

describe.each(PLATFORMS)(
  'steps with every pool connection wanted (%s)',
  (platform) => {
    let gateway: FakeGateway;
    let target: TestApp;
    let gates: Gates;

    beforeAll(async () => {
      gateway = await new FakeGateway().start();
      target = await startTestApp({
        platform,
        imports: [poolModule(gateway.url)],
        typeorm: { poolSize: POOL_SIZE },
        // Were the handlers to wait for each other's connections, PostgreSQL
        // would end them here: the test fails with 503s instead of hanging.
        idempotency: { transactionTimeout: '5s' },
      });
      gates = target.app.get(Gates);
    });
    afterAll(async () => {
      await target?.close();
      await gateway?.stop();
    });

    it(`completes ${REQUESTS} concurrent new keys on a pool of ${POOL_SIZE}: a step always finds a connection`, async () => {
      const keys = Array.from({ length: REQUESTS }, (_, i) => `pool-${i}`);
      const answers = Promise.all(
        keys.map(async (key, i) => {
          const response = await send(target, '/checkout', {
            key,
            body: { amount: 100 + i, reference: key },
          });
          return { status: response.status, body: await response.text() };
        }),
      );
      // Handlers hold their transactions at the barrier while every other
      // request is inside the application, asking for a connection: a handler
      // may not take the last one, which its step needs to commit.
      await gates.beforeStep.reached(POOL_SIZE - 1);
      await until(
        async () => gates.arrived === REQUESTS,
        'every request to reach the controller',
      );
      gates.beforeStep.open();
      const results = await answers;

      expect(results.map((result) => result.status)).toEqual(
        keys.map(() => 201),
      );
      const [{ orders }] = await target.db.query<{ orders: number }>(
        'SELECT count(*)::int AS orders FROM orders',
      );
      const [{ records }] = await target.db.query<{ records: number }>(
        `SELECT count(*)::int AS records FROM idempotency_records WHERE status = 'completed'`,
      );
      expect({ orders, records, charges: gateway.chargeCount }).toEqual({
        orders: REQUESTS,
        records: REQUESTS,
        charges: REQUESTS,
      });
      console.log(
        `pool exhaustion (${platform}, pool of ${POOL_SIZE}): ${REQUESTS} concurrent new keys → ` +
          `${results.filter((result) => result.status === 201).length} × 201, ` +
          `${orders} orders, ${records} records, ${gateway.chargeCount} gateway charges`,
      );
    });
  },
);
