import type {
  INestApplication,
  ModuleMetadata,
  NestApplicationOptions,
} from '@nestjs/common';
import {
  FastifyAdapter,
  type NestFastifyApplication,
} from '@nestjs/platform-fastify';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  TypeOrmModule,
  type TypeOrmDataSourceFactory,
  type TypeOrmModuleOptions,
} from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { IdempotencyModule } from '../../src/index.js';
import { idempotencyMigrations } from '../../migrations/index.js';
import type { IdempotencyModuleOptions } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { CreateOrders1764000000001 } from '../fixtures/create-orders.migration.js';
import { createTestDatabase, type TestDatabase } from './test-database.js';

/** The HTTP platforms every e2e spec runs on. */
export const PLATFORMS = ['express', 'fastify'] as const;

/** An HTTP platform of NestJS: `@nestjs/platform-express` or `-fastify`. */
export type Platform = (typeof PLATFORMS)[number];

/** A running test application on a database of its own (or a shared one). */
export interface TestApp {
  readonly app: INestApplication;
  /** The HTTP platform it runs on. */
  readonly platform: Platform;
  /** Base URL of the listening server, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  readonly db: TestDatabase;
  readonly dataSource: DataSource;
  /** Closes the application and drops its database, unless it was given one. */
  close(): Promise<void>;
}

/** Options of {@link startTestApp}. */
export interface TestAppOptions extends ModuleMetadata {
  /** Options of `IdempotencyModule.forRoot()`; `false` leaves the module out. */
  idempotency?: IdempotencyModuleOptions | false;
  /** Overrides of the TypeORM options. */
  typeorm?: Partial<TypeOrmModuleOptions>;
  /** Creates the DataSource from its options (`forRootAsync`'s `dataSourceFactory`). */
  dataSourceFactory?: TypeOrmDataSourceFactory;
  /** The HTTP platform; Express unless told. */
  platform?: Platform;
  /** Prepares the application before it starts, e.g. sets its WebSocket adapter. */
  configure?: (app: INestApplication) => void;
  /**
   * Runs on this database instead of a new one: another instance of the
   * application, sharing the first one's database. `close()` then leaves the
   * database to its owner.
   */
  database?: TestDatabase;
  /** Keeps each request's raw body (`rawBody: true`), as a webhook receiver needs. */
  rawBody?: boolean;
  /** Options of the Fastify instance (a `querystringParser`), on Fastify. */
  fastify?: FastifyOptions;
}

/** Options of a Fastify instance, as `FastifyAdapter` takes them. */
export type FastifyOptions = NonNullable<
  ConstructorParameters<typeof FastifyAdapter>[0]
>;

/**
 * Boots a Nest application on a new database (migrations run at startup) and
 * listens on a random loopback port: tests talk to it over real HTTP.
 */
export async function startTestApp(options: TestAppOptions): Promise<TestApp> {
  const {
    idempotency = {},
    typeorm,
    dataSourceFactory,
    platform = 'express',
    configure,
    database,
    rawBody,
    fastify,
    imports = [],
    ...metadata
  } = options;
  const db = database ?? (await createTestDatabase());
  const dropDatabase = () => (database ? Promise.resolve() : db.drop());
  try {
    const typeormOptions = {
      type: 'postgres',
      url: db.url,
      entities: [Order],
      migrations: [...idempotencyMigrations, CreateOrders1764000000001],
      migrationsRun: true,
      synchronize: false,
      logging: false,
      ...typeorm,
    } as TypeOrmModuleOptions;
    const moduleRef = await Test.createTestingModule({
      ...metadata,
      imports: [
        dataSourceFactory
          ? TypeOrmModule.forRootAsync({
              useFactory: () => typeormOptions,
              dataSourceFactory,
            })
          : TypeOrmModule.forRoot(typeormOptions),
        ...(idempotency === false
          ? []
          : [IdempotencyModule.forRoot(idempotency)]),
        ...imports,
      ],
    }).compile();
    const app = await listenOn(
      moduleRef,
      platform,
      configure,
      rawBody,
      fastify,
    );
    const dataSource = app.get<DataSource>(getDataSourceToken(typeorm?.name));
    return {
      app,
      platform,
      url: await app.getUrl(),
      db,
      dataSource,
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

/**
 * Creates the application of `moduleRef` on `platform`, lets `configure`
 * prepare it, and listens on a random loopback port; `rawBody` keeps each
 * request's raw body, `fastify` are the Fastify instance's options.
 */
export async function listenOn(
  moduleRef: TestingModule,
  platform: Platform,
  configure?: (app: INestApplication) => void,
  rawBody?: boolean,
  fastify?: FastifyOptions,
): Promise<INestApplication> {
  const appOptions: NestApplicationOptions = {
    rawBody,
    logger: process.env.TEST_LOGS ? ['error', 'warn', 'log', 'debug'] : false,
    // close() ends the keep-alive connections fetch leaves open. Node counts
    // a connection on which no request arrived yet as busy, and after an
    // aborted request fetch may open one it never uses: without this, close()
    // waits for the client to drop it, which it does only when the server's
    // keep-alive timeout passes (5 s on Express, 72 s on Fastify).
    forceCloseConnections: true,
  };
  const app: INestApplication =
    platform === 'fastify'
      ? moduleRef.createNestApplication<NestFastifyApplication>(
          new FastifyAdapter(fastify),
          appOptions,
        )
      : moduleRef.createNestApplication(appOptions);
  try {
    configure?.(app);
    // On Fastify, listen() boots the instance (ready()) before it listens.
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await app.close();
    throw error;
  }
  return app;
}

/** A `fetch` to the test application. */
export function send(
  target: TestApp,
  path: string,
  init: {
    method?: string;
    key?: string;
    headers?: Record<string, string>;
    body?: unknown;
    signal?: AbortSignal;
    /** How a redirect is taken (`'manual'`: the 3xx itself is the answer). */
    redirect?: 'follow' | 'manual' | 'error';
  } = {},
): Promise<Response> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.key !== undefined) {
    headers['Idempotency-Key'] = init.key;
  }
  if (init.body !== undefined) {
    headers['Content-Type'] = 'application/json';
  }
  return fetch(`${target.url}${path}`, {
    method: init.method ?? 'POST',
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: init.signal,
    redirect: init.redirect,
  });
}
