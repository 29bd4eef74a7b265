import { claimsInProgress } from '../utils/claims.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { TUNED_SAMPLE, type SampleProcess } from '../utils/sample-process.js';
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
import {
  describeWithPgBouncer,
  startPgBouncer,
  type PgBouncer,
} from './pgbouncer.js';

const INSTANCES = 4;
const KEYS = 40;
const COPIES = 10;
/**
 * Server connections PgBouncer may open: fewer than the instances' pools
 * (10 each), and than the requests running at once. A handler holds a server
 * connection only for its transaction, from its first statement to its
 * commit, and needs no other one meanwhile (the sample's charge step runs
 * before its first statement); claims, steps and renewals are single
 * statements. So the requests only queue for server connections.
 */
const SERVER_POOL = 8;

/**
 * In transaction pooling, a session advisory lock and a LISTEN mean nothing:
 * the presence session is turned off, or connects to PostgreSQL directly.
 */
const PRESENCE_MODES = [
  { presence: 'off', label: 'presence: false' },
  { presence: 'direct', label: 'presence: { url } connecting directly' },
] as const;

describeWithPgBouncer()(
  'four instances of the sample app behind PgBouncer in transaction pooling mode',
  () => {
    describe.each(PRESENCE_MODES)('with $label', ({ presence }) => {
      let db: TestDatabase;
      let gateway: FakeGateway;
      let held: HeldGateway;
      let bouncer: PgBouncer;
      let instances: SampleProcess[] = [];

      beforeAll(async () => {
        db = await createTestDatabase();
        gateway = await new FakeGateway().start();
        held = await new HeldGateway(gateway).start();
        bouncer = await startPgBouncer(db.url, {
          poolMode: 'transaction',
          poolSize: SERVER_POOL,
        });
        instances = await startInstances(
          INSTANCES,
          {
            DATABASE_URL: bouncer.url,
            GATEWAY_URL: held.url,
            SAMPLE_PRESENCE: presence === 'off' ? 'off' : db.url,
          },
          TUNED_SAMPLE,
        );
      });
      afterAll(async () => {
        await Promise.all(instances.map((instance) => instance.stop()));
        await held?.stop();
        await bouncer?.stop();
        await gateway?.stop();
        await db?.drop();
      });

      it(`executes each of ${KEYS} keys exactly once under ${KEYS * COPIES} concurrent duplicates`, async () => {
        const [pool] = await bouncer.pools();
        expect(pool.pool_mode).toBe('transaction');
        const keys = Array.from(
          { length: KEYS },
          (_, k) => `bouncer-${presence}-${k}`,
        );
        let presenceLine = '';
        const counts = await expectDuplicatesRefusedThenReplayed(
          db,
          gateway,
          held,
          instances,
          keys,
          COPIES,
          async () => {
            // One claim per key, each its own attempt's, leased.
            const claims = await claimsInProgress(db);
            expect(claims).toHaveLength(KEYS);
            expect(claims.filter((claim) => !claim.leased)).toEqual([]);
            expect(new Set(claims.map((claim) => claim.owner)).size).toBe(KEYS);
            const sessions = await presenceSessions(db);
            const instanceIds = [
              ...new Set(claims.map((claim) => claim.instance)),
            ];
            if (presence === 'off') {
              // No presence session, and claims owned by no instance: a
              // dead instance's keys wait for their leases.
              expect(sessions).toEqual([]);
              expect(instanceIds).toEqual([null]);
            } else {
              // One presence session per instance, none of them a server
              // connection of PgBouncer, each holding the lock of the
              // instance its claims name.
              expect(sessions).toHaveLength(INSTANCES);
              const serverPids = (await bouncer.servers()).map((server) =>
                Number(server.remote_pid),
              );
              expect(
                sessions.filter((pid) => serverPids.includes(pid)),
              ).toEqual([]);
              for (const instance of instanceIds) {
                expect(await presenceBackend(db, instance!)).toEqual({
                  pid: expect.any(Number),
                  applicationName: PRESENCE_APPLICATION_NAME,
                  listening: true,
                });
              }
            }
            presenceLine = `${sessions.length} presence sessions, claims of ${instanceIds.filter(Boolean).length} instances`;
            // The requests running hold no transaction, hence no server
            // connection, while they wait for the gateway.
            expect(await idleInTransaction(db)).toEqual([]);
          },
        );
        const [after] = await bouncer.pools();
        console.log(
          `pgbouncer (${INSTANCES} processes, pool_mode ${after.pool_mode}, ${SERVER_POOL} server connections, presence ${presence}): ` +
            `${describeCounts(counts)}; while held: ${presenceLine}`,
        );
      });
    });
  },
);
