import type { SampleProcess } from '../utils/sample-process.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  describeCounts,
  expectDuplicatesExecutedOnce,
  startInstances,
} from './payments-load.js';
import {
  describeWithPgBouncer,
  startPgBouncer,
  type PgBouncer,
} from './pgbouncer.js';

const INSTANCES = 4;
const KEYS = 40;
const COPIES = 10;
/**
 * Server connections PgBouncer may open: the instances' pools (10 each)
 * together. A handler holds its server connection for its whole transaction
 * while its step commits on another one: with fewer, every server
 * connection can end up held by a handler waiting for one.
 */
const SERVER_POOL = INSTANCES * 10;

describeWithPgBouncer()(
  'four instances of the sample app behind PgBouncer in transaction pooling mode',
  () => {
    let db: TestDatabase;
    let gateway: FakeGateway;
    let bouncer: PgBouncer;
    let instances: SampleProcess[] = [];

    beforeAll(async () => {
      db = await createTestDatabase();
      gateway = await new FakeGateway().start();
      bouncer = await startPgBouncer(db.url, {
        poolMode: 'transaction',
        poolSize: SERVER_POOL,
      });
      instances = await startInstances(INSTANCES, {
        DATABASE_URL: bouncer.url,
        GATEWAY_URL: gateway.url,
      });
    });
    afterAll(async () => {
      await Promise.all(instances.map((instance) => instance.stop()));
      await bouncer?.stop();
      await gateway?.stop();
      await db?.drop();
    });

    it(`executes each of ${KEYS} keys exactly once under ${KEYS * COPIES} concurrent duplicates`, async () => {
      const [pool] = await bouncer.pools();
      expect(pool.pool_mode).toBe('transaction');
      const keys = Array.from({ length: KEYS }, (_, k) => `bouncer-${k}`);
      const counts = await expectDuplicatesExecutedOnce(
        db,
        gateway,
        instances,
        keys,
        COPIES,
      );
      const [after] = await bouncer.pools();
      console.log(
        `pgbouncer (${INSTANCES} processes, pool_mode ${after.pool_mode}): ${describeCounts(counts)}; ` +
          `server connections now ${Number(after.sv_active) + Number(after.sv_idle) + Number(after.sv_used)} for ${after.cl_active} clients`,
      );
    });
  },
);
