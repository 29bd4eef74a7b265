import {
  Module,
  type INestApplication,
  type ModuleMetadata,
  type Type,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { idempotencySqlMigrations } from '../../migrations/index.js';
import {
  IdempotencyModule,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import { listenOn, type Platform } from '../utils/test-app.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import type { AdapterFixture } from './adapter-fixture.js';
import { PaymentsController, TERMINATOR } from './payments.controller.js';

/** The payments tables of the adapters' suites. */
export const PAYMENTS_SQL = `
  CREATE TABLE payments (
    id serial PRIMARY KEY,
    key text NOT NULL,
    amount integer NOT NULL,
    charge_id text
  );
  CREATE TABLE ledger_entries (
    id serial PRIMARY KEY,
    payment_id integer NOT NULL
      REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    account text,
    amount integer NOT NULL
  )`;

/**
 * Makes a database with the module's schema, applied from its plain SQL
 * files (as an application without TypeORM applies them), and the payments
 * tables.
 */
export async function createAdapterDatabase(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  try {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      for (const { sql } of await idempotencySqlMigrations()) {
        await client.query(sql);
      }
      await client.query(PAYMENTS_SQL);
    } finally {
      await client.end();
    }
    return db;
  } catch (error) {
    await db.drop();
    throw error;
  }
}

/** A running payments application on one data library. */
export interface AdapterApp {
  readonly app: INestApplication;
  readonly url: string;
  readonly db: TestDatabase;
  close(): Promise<void>;
}

/**
 * Boots the payments application on `fixture`'s data library and on
 * `platform`, on a database of its own (or `database`, shared), listening
 * on a random loopback port.
 */
export async function startAdapterApp(
  fixture: AdapterFixture,
  options: {
    platform?: Platform;
    idempotency?: IdempotencyModuleOptions;
    database?: TestDatabase;
    /** Where the library's client connects; the database's URL by default. */
    clientUrl?: string;
    /** The application's controllers: the payments handler by default. */
    controllers?: Type[];
    /** Providers beside the library's (those of `controllers`). */
    providers?: ModuleMetadata['providers'];
  } = {},
): Promise<AdapterApp> {
  const db = options.database ?? (await createAdapterDatabase());
  const dropDatabase = () => (options.database ? Promise.resolve() : db.drop());
  try {
    const {
      imports = [],
      providers = [],
      adapter,
    } = fixture.setUp(options.clientUrl ?? db.url);

    @Module({
      providers: [
        {
          provide: TERMINATOR,
          useValue: async (pid: number) => {
            await db.query('SELECT pg_terminate_backend($1, 10000)', [pid]);
          },
        },
      ],
      exports: [TERMINATOR],
    })
    class TerminatorModule {}

    const moduleRef = await Test.createTestingModule({
      imports: [
        ...imports,
        TerminatorModule,
        IdempotencyModule.forRoot({
          gc: false,
          ...options.idempotency,
          ...(adapter ? { adapter } : {}),
        }),
      ],
      controllers: options.controllers ?? [PaymentsController],
      providers: [...providers, ...(options.providers ?? [])],
    }).compile();
    const app = await listenOn(moduleRef, options.platform ?? 'express');
    return {
      app,
      url: await app.getUrl(),
      db,
      async close() {
        await app.close();
        await dropDatabase();
      },
    };
  } catch (error) {
    await dropDatabase();
    throw error;
  }
}
