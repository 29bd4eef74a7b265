import type { SampleProcess } from '../utils/sample-process.js';
import { claimsInProgress } from '../utils/claims.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import {
  idleInTransaction,
  PRESENCE_APPLICATION_NAME,
  presenceBackend,
  presenceSessions,
} from '../utils/sessions.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import { HeldGateway } from './held-gateway.js';
import {
  describeCounts,
  expectDuplicatesRefusedThenReplayed,
  startInstances,
} from './payments-load.js';

const INSTANCES = 4;
const KEYS = 40;
const COPIES = 10;

describe('four instances of the sample app on one database', () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let held: HeldGateway;
  let instances: SampleProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
    held = await new HeldGateway(gateway).start();
    instances = await startInstances(INSTANCES, {
      DATABASE_URL: db.url,
      GATEWAY_URL: held.url,
    });
  });
  afterAll(async () => {
    await Promise.all(instances.map((instance) => instance.stop()));
    await held?.stop();
    await gateway?.stop();
    await db?.drop();
  });

  it(`executes each of ${KEYS} keys exactly once under ${KEYS * COPIES} concurrent duplicates: one claim per key, leased to a live instance, every other copy refused on every instance`, async () => {
    const keys = Array.from({ length: KEYS }, (_, k) => `multi-${k}`);
    let claimedBy: string[] = [];
    const counts = await expectDuplicatesRefusedThenReplayed(
      db,
      gateway,
      held,
      instances,
      keys,
      COPIES,
      async () => {
        // One claim per key, each its own attempt's, leased, and owned by
        // an instance whose presence session holds its lock.
        const claims = await claimsInProgress(db);
        expect(claims.map((claim) => claim.key)).toEqual([...keys].sort());
        expect(claims.filter((claim) => !claim.leased)).toEqual([]);
        expect(new Set(claims.map((claim) => claim.owner)).size).toBe(KEYS);
        claimedBy = [...new Set(claims.map((claim) => claim.instance!))];
        expect(claimedBy.length).toBeLessThanOrEqual(INSTANCES);
        for (const instance of claimedBy) {
          expect(await presenceBackend(db, instance)).toEqual({
            pid: expect.any(Number),
            applicationName: PRESENCE_APPLICATION_NAME,
            listening: true,
          });
        }
        expect(await presenceSessions(db)).toHaveLength(INSTANCES);
        // The requests running hold no transaction while they wait for
        // the gateway.
        expect(await idleInTransaction(db)).toEqual([]);
      },
    );
    // Each key was executed by the instance that claimed it.
    const executors = await db.query<{ executions: number }>(
      `SELECT count(*)::int AS executions FROM idempotency_records
       WHERE status = 'completed' GROUP BY owner_instance ORDER BY 1`,
    );
    expect(executors.map((row) => row.executions)).toEqual(
      counts.executedPerInstance
        .filter((executions) => executions > 0)
        .sort((a, b) => a - b),
    );
    console.log(
      `multi-instance (${INSTANCES} processes): ${describeCounts(counts)}; ` +
        `claims held by ${claimedBy.length} instances while the gateway held every charge; ` +
        `${held.resent} charge calls sent again to the gateway`,
    );
  });
});
