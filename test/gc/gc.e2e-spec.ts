import {
  Logger,
  type DynamicModule,
  type INestApplication,
} from '@nestjs/common';
import { jest } from '@jest/globals';
import { SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IdempotencyCollector,
  IdempotencyModule,
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import { until } from '../utils/barrier.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';

/** An application instance on a shared database. */
async function instance(
  db: TestDatabase,
  idempotency: IdempotencyModuleOptions | DynamicModule,
): Promise<INestApplication> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: db.url,
        migrations: idempotencyMigrations,
        migrationsRun: true,
      }),
      'module' in idempotency
        ? (idempotency as DynamicModule)
        : IdempotencyModule.forRoot(idempotency as IdempotencyModuleOptions),
    ],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  return app;
}

/** Inserts `count` records, expired or not, with one statement. */
async function seed(
  db: TestDatabase,
  prefix: string,
  count: number,
  expired: boolean,
): Promise<void> {
  await db.query(
    `INSERT INTO ${IDEMPOTENCY_TABLE_NAME} (scope, key, fingerprint, method, path, status,
       response_status, response_headers, response_body, completed_at, expires_at)
     SELECT 'global', $1 || n, 'f', 'POST', '/x', 'completed', 201, '{}', '\\x7b7d', now(),
       now() + CASE WHEN $2 THEN interval '-1 hour' ELSE interval '1 hour' END
     FROM generate_series(1, $3) n`,
    [prefix, expired, count],
  );
}

const count = async (db: TestDatabase, where = 'true') =>
  (
    await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${IDEMPOTENCY_TABLE_NAME} WHERE ${where}`,
    )
  )[0].n;

describe('garbage collection', () => {
  let db: TestDatabase;
  const apps: INestApplication[] = [];

  beforeEach(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await db.drop();
  });

  const start = async (
    idempotency: IdempotencyModuleOptions | DynamicModule,
  ) => {
    const app = await instance(db, idempotency);
    apps.push(app);
    return app;
  };

  it('collect() deletes every expired record in batches, keeps live ones, and returns the count', async () => {
    const app = await start({ gc: false });
    await seed(db, 'old-', 2500, true);
    await seed(db, 'live-', 10, false);
    expect(await app.get(IdempotencyCollector).collect(1000)).toBe(2500);
    expect(await count(db)).toBe(10);
    expect(await count(db, 'expires_at < now()')).toBe(0);
    expect(await app.get(IdempotencyCollector).collect()).toBe(0);
  });

  it('skips rows another transaction holds instead of waiting for them', async () => {
    const app = await start({ gc: false });
    await seed(db, 'old-', 100, true);
    const holder = await holdInTransaction(
      db.url,
      `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key IN ('old-1', 'old-2', 'old-3') FOR UPDATE`,
    );
    try {
      // Finishes while the rows stay locked: it did not wait for them.
      expect(await app.get(IdempotencyCollector).collect(10)).toBe(97);
    } finally {
      await holder.release();
    }
    expect(await app.get(IdempotencyCollector).collect()).toBe(3);
  });

  it('two instances collecting at once delete every row exactly once between them', async () => {
    const [a, b] = [await start({ gc: false }), await start({ gc: false })];
    await seed(db, 'old-', 20_000, true);
    const [removedA, removedB] = await Promise.all([
      a.get(IdempotencyCollector).collect(500),
      b.get(IdempotencyCollector).collect(500),
    ]);
    expect(removedA + removedB).toBe(20_000);
    expect(removedA).toBeGreaterThan(0);
    expect(removedB).toBeGreaterThan(0);
    expect(await count(db)).toBe(0);
  });

  it('runs on its own schedule, and survives a failing run', async () => {
    const app = await start({ gc: { interval: '20ms', batchSize: 50 } });
    expect(app.get(SchedulerRegistry).getIntervals()).toContain(
      'idempotency-gc',
    );
    await seed(db, 'old-', 120, true);
    await until(
      async () => (await count(db)) === 0,
      'the scheduled collection',
    );

    // A run that fails (the table is gone) is logged and retried later.
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      await db.query(
        `ALTER TABLE ${IDEMPOTENCY_TABLE_NAME} RENAME TO parked_records`,
      );
      await until(
        async () =>
          warn.mock.calls.some(([message]) =>
            String(message).startsWith('GC failed'),
          ),
        'a failing collection',
      );
      await db.query(
        `ALTER TABLE parked_records RENAME TO ${IDEMPOTENCY_TABLE_NAME}`,
      );
    } finally {
      warn.mockRestore();
    }
    await seed(db, 'later-', 30, true);
    await until(
      async () => (await count(db)) === 0,
      'the next scheduled collection',
    );
  });

  it('schedules nothing with gc: false', async () => {
    const app = await start({ gc: false });
    expect(app.get(SchedulerRegistry).getIntervals()).not.toContain(
      'idempotency-gc',
    );
    expect(app.get(SchedulerRegistry).getCronJobs().has('idempotency-gc')).toBe(
      false,
    );
  });

  it('can run on a cron expression', async () => {
    const app = await start({ gc: { cron: '* * * * * *' } });
    expect(
      app.get(SchedulerRegistry).getCronJob('idempotency-gc'),
    ).toBeDefined();
    await seed(db, 'old-', 10, true);
    await until(async () => (await count(db)) === 0, 'the cron collection');
  });

  it('also deletes the expired steps of requests that never finished', async () => {
    const app = await start({ gc: false });
    await db.query(
      `INSERT INTO ${IDEMPOTENCY_STEPS_TABLE_NAME} (scope, key, step, result, expires_at)
       SELECT 'global', 'k' || n, 'charge', '{"id":1}', now() + CASE WHEN n <= 40 THEN interval '-1 hour' ELSE interval '1 hour' END
       FROM generate_series(1, 50) n`,
    );
    expect(await app.get(IdempotencyCollector).collect()).toBe(40);
    const [{ left }] = await db.query<{ left: number }>(
      `SELECT count(*)::int AS left FROM ${IDEMPOTENCY_STEPS_TABLE_NAME}`,
    );
    expect(left).toBe(10);
  });

  it('takes its schedule from forRootAsync options too', async () => {
    const app = await start(
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ gc: { interval: '20ms' } }),
      }),
    );
    expect(app.get(SchedulerRegistry).getIntervals()).toContain(
      'idempotency-gc',
    );
    await seed(db, 'old-', 25, true);
    await until(
      async () => (await count(db)) === 0,
      'the scheduled collection',
    );
  });
});
