/**
 * The payments promise and the store's conformance suite on every data
 * library's adapter behind PgBouncer in transaction pooling, as the TypeORM
 * path is tested in test/faults/pgbouncer.e2e-spec.ts: the library's pool
 * connects through PgBouncer, the presence session directly.
 */
import { IdempotencyStore } from '../../src/index.js';
import { describeStoreConformance } from '../stores/conformance.js';
import {
  describeWithPgBouncer,
  startPgBouncer,
  type PgBouncer,
} from '../faults/pgbouncer.js';
import type { TestDatabase } from '../utils/test-database.js';
import {
  createAdapterDatabase,
  startAdapterApp,
  type AdapterApp,
} from './adapter-app.js';
import { ADAPTERS } from './adapters.js';
import { describePaymentsPromise } from './payments-promise.js';

describeWithPgBouncer()(
  'payments behind PgBouncer in transaction pooling',
  () => {
    describe.each(ADAPTERS.map((fixture) => [fixture.name, fixture] as const))(
      'on %s',
      (_name, fixture) => {
        let db: TestDatabase;
        let bouncer: PgBouncer;
        let target: AdapterApp;

        beforeAll(async () => {
          db = await createAdapterDatabase();
          bouncer = await startPgBouncer(db.url, {
            poolMode: 'transaction',
            poolSize: 4,
          });
          target = await startAdapterApp(fixture, {
            database: db,
            clientUrl: bouncer.url,
            idempotency: { presence: { url: db.url } },
          });
        });
        afterAll(async () => {
          await target?.close();
          await bouncer?.stop();
          await db?.drop();
        });

        it('runs its statements through PgBouncer in transaction pooling', async () => {
          const [pool] = await bouncer.pools();
          expect(pool.pool_mode).toBe('transaction');
        });

        describePaymentsPromise(() => target);
      },
    );

    for (const fixture of ADAPTERS) {
      describeStoreConformance(
        `PostgreSQL on ${fixture.name} behind PgBouncer`,
        async () => {
          const db = await createAdapterDatabase();
          const bouncer = await startPgBouncer(db.url, {
            poolMode: 'transaction',
            poolSize: 4,
          }).catch(async (error: unknown) => {
            await db.drop();
            throw error;
          });
          const target = await startAdapterApp(fixture, {
            database: db,
            clientUrl: bouncer.url,
            idempotency: { presence: { url: db.url } },
          }).catch(async (error: unknown) => {
            await bouncer.stop();
            await db.drop();
            throw error;
          });
          return {
            store: target.app.get<IdempotencyStore>(IdempotencyStore),
            async close() {
              await target.close();
              await bouncer.stop();
              await db.drop();
            },
          };
        },
      );
    }
  },
);
