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

const INSTANCES = 4;
const KEYS = 40;
const COPIES = 10;

describe('four instances of the sample app on one database', () => {
  let db: TestDatabase;
  let gateway: FakeGateway;
  let instances: SampleProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    gateway = await new FakeGateway().start();
    instances = await startInstances(INSTANCES, {
      DATABASE_URL: db.url,
      GATEWAY_URL: gateway.url,
    });
  });
  afterAll(async () => {
    await Promise.all(instances.map((instance) => instance.stop()));
    await gateway?.stop();
    await db?.drop();
  });

  it(`executes each of ${KEYS} keys exactly once under ${KEYS * COPIES} concurrent duplicates`, async () => {
    const keys = Array.from({ length: KEYS }, (_, k) => `multi-${k}`);
    const counts = await expectDuplicatesExecutedOnce(
      db,
      gateway,
      instances,
      keys,
      COPIES,
    );
    console.log(
      `multi-instance (${INSTANCES} processes): ${describeCounts(counts)}`,
    );
  });
});
