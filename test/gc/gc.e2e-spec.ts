import {
  Logger,
  type DynamicModule,
  type INestApplication,
  type LoggerService,
} from '@nestjs/common';
import { jest } from '@jest/globals';
import { createHash } from 'node:crypto';
import { SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IdempotencyCollector,
  IdempotencyModule,
  type IdempotencyEvent,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
} from '../../migrations/index.js';
import { until, untilAdvisoryLocks } from '../utils/barrier.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';

/** An application instance on a shared database. */
async function instance(
  db: TestDatabase,
  idempotency: IdempotencyModuleOptions | DynamicModule,
  logger: LoggerService | false = false,
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
  const app = moduleRef.createNestApplication({ logger });
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
    logger?: LoggerService,
  ) => {
    const app = await instance(db, idempotency, logger);
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

  /** Steps of keys whose requests never completed: 2 expired, 1 live. */
  const seedSteps = () =>
    db.query(
      `INSERT INTO ${IDEMPOTENCY_STEPS_TABLE_NAME} (scope, key, step, result, expires_at) VALUES
         ('global', 'lost-1', 'charge', '{"id":"ch_1","amount":1250}', now() - interval '1 hour'),
         ('global', 'lost-1', 'receipt', '"receipt-for-ch_1"', now() - interval '1 hour'),
         ('tenant-b', 'lost-2', 'charge', '{"id":"ch_2","amount":10}', now() - interval '1 hour'),
         ('global', 'running', 'charge', '{"id":"ch_3","amount":20}', now() + interval '1 hour')`,
    );
  const stepsLeft = async () =>
    (
      await db.query<{ key: string; step: string }>(
        `SELECT key, step FROM ${IDEMPOTENCY_STEPS_TABLE_NAME} ORDER BY key, step`,
      )
    ).map((row) => `${row.key}/${row.step}`);
  const byStep = (a: { step: string }, b: { step: string }) =>
    a.step < b.step ? -1 : a.step > b.step ? 1 : 0;
  const abandonedOf = (events: IdempotencyEvent[]) =>
    events
      .filter((event) => event.type === 'abandoned')
      .map((event) => ({ ...event, steps: [...event.steps!].sort(byStep) }))
      .sort((a, b) => (a.key! < b.key! ? -1 : 1));
  const ABANDONED = [
    {
      type: 'abandoned',
      scope: 'global',
      key: 'lost-1',
      steps: [
        { step: 'charge', result: { id: 'ch_1', amount: 1250 } },
        { step: 'receipt', result: 'receipt-for-ch_1' },
      ],
    },
    {
      type: 'abandoned',
      scope: 'tenant-b',
      key: 'lost-2',
      steps: [{ step: 'charge', result: { id: 'ch_2', amount: 10 } }],
    },
  ];
  /**
   * Makes the commit of a collection of steps wait for the test (`block`),
   * or fail (`fail`): a deferred trigger runs at the commit, after the
   * collector has emitted its events.
   */
  const gateStepDeletion = async (mode: 'block' | 'fail') => {
    await db.query(`CREATE TABLE IF NOT EXISTS gc_gate (mode text NOT NULL)`);
    await db.query(`DELETE FROM gc_gate`);
    await db.query(`INSERT INTO gc_gate VALUES ($1)`, [mode]);
    await db.query(`
      CREATE OR REPLACE FUNCTION gc_gate() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF (SELECT mode FROM gc_gate) = 'fail' THEN
          RAISE EXCEPTION 'the collector crashed before its deletion committed';
        END IF;
        PERFORM pg_advisory_xact_lock(4242);
        RETURN NULL;
      END $$`);
    await db.query(`
      CREATE CONSTRAINT TRIGGER gc_gate AFTER DELETE ON ${IDEMPOTENCY_STEPS_TABLE_NAME}
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION gc_gate()`);
  };

  it('reports the steps and results of each key whose request never completed as an abandoned event, logged as a warning, before their deletion commits', async () => {
    const events: IdempotencyEvent[] = [];
    const warnings: string[] = [];
    const app = await start(
      { gc: false, onEvent: (event) => events.push(event) },
      {
        log: () => undefined,
        error: () => undefined,
        warn: (message: unknown) => warnings.push(String(message)),
      },
    );
    await seedSteps();
    await gateStepDeletion('block');
    await db.query(`SELECT pg_advisory_lock(4242)`);
    const collection = app.get(IdempotencyCollector).collect();
    await until(
      async () => abandonedOf(events).length === 2,
      'the abandoned events',
    );
    expect(abandonedOf(events)).toEqual(ABANDONED);
    // Reported while the deletion has not committed: the steps are there.
    await untilAdvisoryLocks(db, 'waiting', 1);
    expect(await stepsLeft()).toEqual([
      'lost-1/charge',
      'lost-1/receipt',
      'lost-2/charge',
      'running/charge',
    ]);
    await db.query(`SELECT pg_advisory_unlock(4242)`);
    expect(await collection).toBe(3);
    expect(await stepsLeft()).toEqual(['running/charge']);

    for (const event of events.filter((e) => e.type === 'abandoned')) {
      expect(warnings).toContain(
        // The key as telemetry's `keys` shows it: hashed by default.
        // Step names only: their results go to `onEvent`, never to logs.
        `event=abandoned key_hash=${createHash('sha256').update(event.key!).digest('hex').slice(0, 16)} steps=${JSON.stringify(event.steps!.map(({ step }) => step))}`,
      );
    }
    expect(
      warnings.filter((w) => w.startsWith('event=abandoned')),
    ).toHaveLength(2);
  });

  it('leaves a key of which another transaction holds a step, whole, instead of waiting for it (two collectors on one key deadlocked)', async () => {
    const events: IdempotencyEvent[] = [];
    const app = await start({
      gc: false,
      onEvent: (event) => events.push(event),
    });
    await seedSteps();
    // Another instance's collector, which took one step of lost-1 first.
    const other = await holdInTransaction(
      db.url,
      `SELECT 1 FROM ${IDEMPOTENCY_STEPS_TABLE_NAME} WHERE key = 'lost-1' AND step = 'receipt' FOR UPDATE`,
    );
    let collected: number | 'waiting';
    let bound: NodeJS.Timeout | undefined;
    try {
      collected = await Promise.race([
        app.get(IdempotencyCollector).collect(),
        // Far longer than a collection takes: without the fix, it waits
        // for the lock for as long as it is held.
        new Promise<'waiting'>((resolve) => {
          bound = setTimeout(() => resolve('waiting'), 20_000);
        }),
      ]);
    } finally {
      clearTimeout(bound);
      await other.release();
    }
    // lost-2 only: lost-1 is neither deleted nor reported in part.
    expect(collected).toBe(1);
    expect(abandonedOf(events)).toEqual([ABANDONED[1]]);
    expect(await stepsLeft()).toEqual([
      'lost-1/charge',
      'lost-1/receipt',
      'running/charge',
    ]);
    // The next collection takes it whole.
    events.length = 0;
    expect(await app.get(IdempotencyCollector).collect()).toBe(2);
    expect(abandonedOf(events)).toEqual([ABANDONED[0]]);
    expect(await stepsLeft()).toEqual(['running/charge']);
  });

  it('two collectors on keys of two expired steps each never fail or wait on each other, and report each key once, whole', async () => {
    const reported: string[] = [];
    const onEvent = (event: IdempotencyEvent) => {
      if (event.type === 'abandoned') {
        reported.push(`${event.key}:${event.steps!.length}`);
      }
    };
    const [a, b] = [
      await start({ gc: false, onEvent }),
      await start({ gc: false, onEvent }),
    ];
    // Each key's two steps interleave with the next key's in expiry order,
    // so that small batches cut keys in two.
    await db.query(
      `INSERT INTO ${IDEMPOTENCY_STEPS_TABLE_NAME} (scope, key, step, result, expires_at)
       SELECT 'global', 'k' || n, s, '"r"', now() - interval '1 day'
         + (n * 2 + (s = 'b')::int) * interval '1 ms'
       FROM generate_series(1, 600) n, unnest(array['a', 'b']) s`,
    );
    const collect = async (app: INestApplication) => {
      let removed = 0;
      for (;;) {
        const batch = await app.get(IdempotencyCollector).collect(7);
        removed += batch;
        if (batch === 0) {
          return removed;
        }
      }
    };
    const [removedA, removedB] = await Promise.all([collect(a), collect(b)]);
    expect(removedA + removedB).toBe(1200);
    expect(await stepsLeft()).toEqual([]);
    expect(reported).toHaveLength(600);
    expect(new Set(reported).size).toBe(600);
    expect(reported.every((entry) => entry.endsWith(':2'))).toBe(true);
  });

  it('reports abandoned steps again when their deletion did not commit', async () => {
    const events: IdempotencyEvent[] = [];
    const app = await start({
      gc: false,
      onEvent: (event) => events.push(event),
    });
    await seedSteps();
    await gateStepDeletion('fail');
    await expect(app.get(IdempotencyCollector).collect()).rejects.toThrow(
      'the collector crashed before its deletion committed',
    );
    expect(abandonedOf(events)).toEqual(ABANDONED);
    expect(await stepsLeft()).toHaveLength(4);

    events.length = 0;
    await db.query(`UPDATE gc_gate SET mode = 'pass'`);
    expect(await app.get(IdempotencyCollector).collect()).toBe(3);
    expect(abandonedOf(events)).toEqual(ABANDONED);
    expect(await stepsLeft()).toEqual(['running/charge']);
    // Reported once deleted: never again.
    events.length = 0;
    expect(await app.get(IdempotencyCollector).collect()).toBe(0);
    expect(abandonedOf(events)).toEqual([]);
  });

  it('deletes expired claims in progress (left by a crashed instance), and keeps live ones', async () => {
    const app = await start({ gc: false });
    const claim = (key: string) =>
      db.query(
        `SELECT FROM idempotency_acquire('global', $1, 'f', 'POST', '/x',
           gen_random_uuid(), NULL, 60000, 60000, false)`,
        [key],
      );
    await claim('crashed');
    await claim('running');
    await claim('long-running');
    await db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME}
       SET lease_expires_at = now() - interval '1 hour', expires_at = now() - interval '1 hour'
       WHERE key = 'crashed'`,
    );
    // Running for longer than its ttl: its lease, renewed, keeps it.
    await db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET expires_at = now() - interval '1 hour'
       WHERE key = 'long-running'`,
    );
    expect(await app.get(IdempotencyCollector).collect()).toBe(1);
    expect(
      await db.query(
        `SELECT key, status FROM ${IDEMPOTENCY_TABLE_NAME} ORDER BY key`,
      ),
    ).toEqual([
      { key: 'long-running', status: 'in_progress' },
      { key: 'running', status: 'in_progress' },
    ]);
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
