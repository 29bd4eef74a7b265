import { until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  idleInTransaction,
  untilIdleInTransaction,
} from '../utils/sessions.js';
import { poolOf } from '../utils/statement-counter.js';
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
  'every connection of the pool wanted (%s)',
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
        // Were the handlers to wait for each other's connections, the
        // deadline would abandon them: the test fails with 503s instead of
        // hanging.
        idempotency: { transactionTimeout: '15s', gc: false },
      });
      gates = target.app.get(Gates);
    });
    afterAll(async () => {
      gates?.beforeStep.open();
      gates?.beforeFirstStatement.open();
      await target?.close();
      await gateway?.stop();
    });

    const claimed = async (keys: string[]) =>
      (
        await target.db.query<{ claimed: number }>(
          `SELECT count(*)::int AS claimed FROM idempotency_records
         WHERE key = ANY($1) AND status = 'in_progress'`,
          [keys],
        )
      )[0].claimed;
    /**
     * Waits for the answers to the requests of `keys` and checks that each
     * completed once: a 201, one order charged through its step, one
     * completed record, one gateway charge.
     */
    const expectEachCompletedOnce = async (
      keys: string[],
      answers: Promise<number[]>,
    ) => {
      const statuses = await answers;
      expect(statuses).toEqual(keys.map(() => 201));
      const [{ orders, charged }] = await target.db.query<{
        orders: number;
        charged: number;
      }>(
        `SELECT count(*)::int AS orders,
              count(*) FILTER (WHERE source LIKE 'ch\\_%')::int AS charged
       FROM orders WHERE reference = ANY($1)`,
        [keys],
      );
      const [{ records }] = await target.db.query<{ records: number }>(
        `SELECT count(*)::int AS records FROM idempotency_records
       WHERE key = ANY($1) AND status = 'completed'`,
        [keys],
      );
      let charges = 0;
      for (const key of keys) {
        if (gateway.calls.get(await derivedKeyOf(target.db, key)) === 1) {
          charges += 1;
        }
      }
      const rows = { orders, charged, records, charges };
      expect(rows).toEqual({
        orders: keys.length,
        charged: keys.length,
        records: keys.length,
        charges: keys.length,
      });
      return { statuses, rows };
    };
    const checkout = (path: string, keys: string[]) =>
      Promise.all(
        keys.map(async (key, i) => {
          const response = await send(target, path, {
            key,
            body: { amount: 100 + i, reference: key },
          });
          return response.status;
        }),
      );

    it(`completes ${REQUESTS} concurrent new keys whose handlers write before their step: ${POOL_SIZE - 1} transactions at most, and a step always finds a connection`, async () => {
      const keys = Array.from({ length: REQUESTS }, (_, i) => `pool-${i}`);
      const arrivedBefore = gates.arrived;
      const answers = checkout('/checkout', keys);
      // Handlers hold their transactions at the barrier, before their step,
      // while every other request is inside the application: a transaction
      // may not take the last connection, which the steps need.
      await gates.beforeStep.reached(POOL_SIZE - 1);
      await until(
        async () => gates.arrived === arrivedBefore + REQUESTS,
        'every request to reach the controller',
      );
      await until(
        async () => (await claimed(keys)) === REQUESTS,
        'every key to be claimed',
      );
      // Every key is claimed, but only pool size − 1 handlers began their
      // transaction (they sit idle in it); the others wait for a place.
      expect(
        await untilIdleInTransaction(target.db, POOL_SIZE - 1),
      ).toHaveLength(POOL_SIZE - 1);
      expect(gates.written).toBe(POOL_SIZE - 1);
      gates.beforeStep.open();
      const { statuses, rows } = await expectEachCompletedOnce(keys, answers);
      console.log(
        `full pool (${platform}, pool of ${POOL_SIZE}, handlers writing before their step): ${REQUESTS} concurrent new keys, ` +
          `${POOL_SIZE - 1} transactions open while held → ${statuses.filter((status) => status === 201).length} × 201, ` +
          `${rows.orders} orders, ${rows.records} records, ${rows.charges} gateway charges`,
      );
    });

    it(`lets ${REQUESTS} handlers wait before their first statement at once: they hold no connection, then all complete`, async () => {
      const keys = Array.from({ length: REQUESTS }, (_, i) => `later-${i}`);
      const answers = checkout('/checkout/later', keys);
      // More handlers inside at once than the pool has connections, or
      // transaction places: waiting before its first statement, a handler
      // holds neither.
      await gates.beforeFirstStatement.reached(REQUESTS);
      expect(await claimed(keys)).toBe(REQUESTS);
      expect(await idleInTransaction(target.db)).toEqual([]);
      expect(poolOf(target.dataSource).waitingCount).toBe(0);
      gates.beforeFirstStatement.open();
      const { statuses, rows } = await expectEachCompletedOnce(keys, answers);
      console.log(
        `full pool (${platform}, pool of ${POOL_SIZE}, handlers waiting before their first statement): ` +
          `${REQUESTS} inside at once, none in a transaction → ${statuses.filter((status) => status === 201).length} × 201, ` +
          `${rows.orders} orders, ${rows.records} records, ${rows.charges} gateway charges`,
      );
    });
  },
);
