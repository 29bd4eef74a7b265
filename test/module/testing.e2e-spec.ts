/*
 * An application's own tests, as the README's "Testing your application"
 * shows them: the application module registers the PostgreSQL store over
 * its TypeORM DataSource, and the test puts a memory store in its place by
 * its token, `overrideProvider(IdempotencyStore)`, the one override Nest
 * applies to the module `IdempotencyModule.forRoot()` returns (it matches
 * `overrideModule()` by the identity of an import, and the application
 * imports that object, not the class).
 */
import type { INestApplication } from '@nestjs/common';
import { Test, type TestingModuleBuilder } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyStore, MemoryIdempotencyStore } from '../../src/index.js';
import type { IdempotencyStoreOption } from '../../src/stores/index.js';
import { IdempotencyTestingModule } from '../../src/testing/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  appModule,
  PaymentsController,
  PaymentsModule,
} from './testing.fixtures.js';

/** Sends one payment twice under one key, and checks the replay. */
async function expectReplay(app: INestApplication, key: string): Promise<void> {
  const pay = () =>
    request(app.getHttpServer())
      .post('/payments')
      .set('Idempotency-Key', key)
      .send({ reference: key });

  const first = await pay();
  expect(first.status).toBe(201);
  expect(first.headers['idempotent-replayed']).toBeUndefined();
  expect(first.headers.location).toBe('/payments/latest');
  expect(first.body).toEqual({ execution: 1, reference: key });

  const second = await pay();
  expect(second.status).toBe(201);
  expect(second.headers['idempotent-replayed']).toBe('true');
  expect(second.headers.location).toBe('/payments/latest');
  expect(second.text).toBe(first.text);
  expect(app.get(PaymentsController).executions).toBe(1);
}

describe("an application's own tests, on a memory store in place of the PostgreSQL one", () => {
  let db: TestDatabase;
  let app: INestApplication | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  afterAll(async () => {
    await db?.drop();
  });

  async function start(
    builder: TestingModuleBuilder,
  ): Promise<INestApplication> {
    const moduleRef = await builder.compile();
    app = moduleRef.createNestApplication();
    await app.init();
    return app;
  }

  it('replays from the memory store, and leaves the idempotency table empty', async () => {
    const store = new MemoryIdempotencyStore();
    const started = await start(
      Test.createTestingModule({ imports: [appModule(db.url)] })
        .overrideProvider(IdempotencyStore)
        .useValue(store),
    );

    await expectReplay(started, 'pay-1');
    expect(started.get<IdempotencyStoreOption>(IdempotencyStore)).toBe(store);
    expect(store.size).toBe(1);
    // The application's migrations ran: the table is there, untouched, and
    // the store's own session (LISTEN for completions) was never opened.
    expect(await db.query(`SELECT key FROM ${IDEMPOTENCY_TABLE_NAME}`)).toEqual(
      [],
    );
    expect(
      await db.query(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'idempotency-presence'`,
      ),
    ).toEqual([]);
  });

  it('starts on a database the PostgreSQL store would refuse: it never ran', async () => {
    const empty = await createTestDatabase();
    try {
      const withoutMigrations = () =>
        appModule(empty.url, { migrations: [], migrationsRun: false });
      await expect(
        start(Test.createTestingModule({ imports: [withoutMigrations()] })),
      ).rejects.toThrow(/idempotencyMigrations/);

      const started = await start(
        Test.createTestingModule({ imports: [withoutMigrations()] })
          .overrideProvider(IdempotencyStore)
          .useValue(new MemoryIdempotencyStore()),
      );
      await expectReplay(started, 'pay-2');
    } finally {
      await app?.close();
      app = undefined;
      await empty.drop();
    }
  });

  it('runs without any database once the test replaces the DataSource too', async () => {
    const started = await start(
      Test.createTestingModule({
        // Nothing listens there: a connection attempt would fail the test.
        imports: [
          appModule('postgres://postgres@127.0.0.1:9/none', {
            retryAttempts: 0,
          }),
        ],
      })
        .overrideProvider(IdempotencyStore)
        .useValue(new MemoryIdempotencyStore())
        .overrideProvider(DataSource)
        .useValue(new DataSource({ type: 'postgres' })),
    );

    await expectReplay(started, 'pay-3');
    expect(started.get(DataSource).isInitialized).toBe(false);
  });

  it('replays in a test module of its own on IdempotencyTestingModule, whose store a test can clear', async () => {
    const store = new MemoryIdempotencyStore();
    const started = await start(
      Test.createTestingModule({
        imports: [IdempotencyTestingModule.forRoot({}, store), PaymentsModule],
      }),
    );

    await expectReplay(started, 'pay-4');
    store.clear();
    const again = await request(started.getHttpServer())
      .post('/payments')
      .set('Idempotency-Key', 'pay-4')
      .send({ reference: 'pay-4' });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(again.body).toEqual({ execution: 2, reference: 'pay-4' });
  });
});
