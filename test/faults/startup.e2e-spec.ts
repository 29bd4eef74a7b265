import {
  Body,
  Controller,
  Module,
  Post,
  type LoggerService,
} from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import {
  getDataSourceToken,
  InjectRepository,
  TypeOrmModule,
  type TypeOrmModuleOptions,
} from '@nestjs/typeorm';
import pg, { type Pool } from 'pg';
import type { DataSource, Repository } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyModule,
  Idempotent,
} from '../../src/index.js';
import { idempotencyMigrations } from '../../migrations/index.js';
import { CreateOrders1764000000001 } from '../fixtures/create-orders.migration.js';
import { Order } from '../fixtures/order.entity.js';
import { until } from '../utils/barrier.js';
import { answer } from '../utils/problems.js';
import { lockWaiters, sessions, terminateBackend } from '../utils/sessions.js';
import { TcpGate } from '../utils/tcp-gate.js';
import {
  listenOn,
  PLATFORMS,
  send,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import {
  createTestDatabase,
  type TestDatabase,
  onServer,
} from '../utils/test-database.js';

@Controller('startup')
class StartupController {
  private runs = 0;

  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post()
  @Idempotent()
  async create(@Body() body: { reference: string }) {
    this.runs += 1;
    await this.orders.save(this.orders.create({ reference: body.reference }));
    return { reference: body.reference, run: this.runs };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [StartupController],
})
class StartupModule {}

/** What the module logs (context `Idempotency`), as `<level> <message>`. */
class ModuleLog implements LoggerService {
  readonly lines: string[] = [];

  log(): void {}

  warn(message: unknown, ...params: unknown[]): void {
    this.record('warn', message, params);
  }

  error(message: unknown, ...params: unknown[]): void {
    this.record('error', message, params);
  }

  /** The lines about the start-up check of the database. */
  get checks(): string[] {
    return this.lines.filter((line) => line.includes('start-up check'));
  }

  private record(level: string, message: unknown, params: unknown[]): void {
    if (params.at(-1) === 'Idempotency') {
      this.lines.push(`${level} ${String(message)}`);
    }
  }
}

/** What the module logs when the check lost its connection once. */
const retried = (failure: string) =>
  `warn The start-up check of the database lost its connection (${failure}): retrying in 100 ms (attempt 2 of 10)`;

/**
 * A request left running while the test goes on: if the test fails first,
 * its end is not reported as another failure.
 */
function inFlight<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

/**
 * Resolves with `promise`, or fails as soon as the application's start does:
 * an application that gives up at the first failure fails the test at once.
 */
async function unlessFailed<T>(
  promise: Promise<T>,
  starting: Promise<unknown>,
): Promise<T> {
  return Promise.race([
    promise,
    starting.then(() => {
      throw new Error('The application started before the test let it');
    }),
  ]);
}

/**
 * A session that holds `pg_proc` in an open transaction (ACCESS EXCLUSIVE):
 * the first lookup of a function by name in a backend reads `pg_proc` under
 * a lock that waits for this one, so the start-up check, which names
 * functions, waits there. The test reads the server's views through this
 * session: another one could wait as well.
 */
async function lockFunctions(url: string) {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  await client.query('BEGIN');
  await client.query('LOCK TABLE pg_catalog.pg_proc IN ACCESS EXCLUSIVE MODE');
  let released = false;
  return {
    async query<T>(sql: string, params?: unknown[]): Promise<T[]> {
      return (await client.query(sql, params)).rows as T[];
    },
    async release(): Promise<void> {
      if (!released) {
        released = true;
        await client.query('ROLLBACK').catch(() => undefined);
        await client.end();
      }
    },
  };
}

describe('start-up of an instance whose connection drops during the check of the database', () => {
  /** What each test leaves to close, the last opened first. */
  const opened: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of opened.splice(0).reverse()) {
      await close();
    }
  });

  const database = async (): Promise<TestDatabase> => {
    const db = await createTestDatabase();
    opened.push(() => db.drop());
    return db;
  };

  /** The application's module on the database at `url`: its DataSource is up. */
  const compile = (
    url: string,
    typeorm: Partial<TypeOrmModuleOptions> = {},
  ): Promise<TestingModule> =>
    Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url,
          entities: [Order],
          migrations: [...idempotencyMigrations, CreateOrders1764000000001],
          migrationsRun: true,
          logging: false,
          ...typeorm,
        } as TypeOrmModuleOptions),
        IdempotencyModule.forRoot({ gc: false }),
        StartupModule,
      ],
    }).compile();

  const poolOf = (moduleRef: TestingModule): Pool =>
    (
      moduleRef.get<DataSource>(getDataSourceToken()).driver as unknown as {
        master: Pool;
      }
    ).master;

  /** Starts the application of `moduleRef` (its checks run now), logging to `log`. */
  const start = async (
    moduleRef: TestingModule,
    platform: Platform,
    db: TestDatabase,
    log: ModuleLog,
  ): Promise<TestApp> => {
    const app = await listenOn(moduleRef, platform, (created) =>
      created.useLogger(log),
    );
    opened.push(() => app.close());
    return {
      app,
      platform,
      url: await app.getUrl(),
      db,
      dataSource: app.get<DataSource>(getDataSourceToken()),
      close: () => app.close(),
    };
  };

  /** A first request executes (201), its duplicate is replayed. */
  const expectIdempotent = async (target: TestApp, key: string) => {
    const body = { reference: key };
    const first = await answer(send(target, '/startup', { key, body }));
    expect(first).toEqual({
      status: 201,
      contentType: expect.stringMatching(/^application\/json/) as unknown,
      retryAfter: null,
      replayed: false,
      body: { reference: key, run: 1 },
    });
    const replay = await answer(send(target, '/startup', { key, body }));
    expect(replay).toEqual({ ...first, replayed: true });
    expect(
      await target.db.query(
        'SELECT reference FROM orders WHERE reference = $1',
        [key],
      ),
    ).toEqual([{ reference: key }]);
  };

  describe.each(PLATFORMS)('a connection lost (%s)', (platform) => {
    it('retries the check when PostgreSQL ends its backend (57P01), then starts and answers: 201, then a replay', async () => {
      const db = await database();
      const moduleRef = await compile(db.url);
      const lock = await lockFunctions(db.url);
      opened.push(() => lock.release());
      const log = new ModuleLog();
      const starting = inFlight(start(moduleRef, platform, db, log));
      // The check waits for the lock: its backend is ended as an
      // administrator, a failover or a restart would end it.
      let checking = 0;
      await until(async () => {
        [checking = 0] = await lockWaiters(lock, 'pg_proc');
        return checking !== 0;
      }, 'the start-up check to wait for pg_proc');
      // Waits until it is gone. (terminateBackend reads pg_stat_activity,
      // which a session shows as it was at the start of its transaction.)
      const [{ ended }] = await lock.query<{ ended: boolean }>(
        'SELECT pg_terminate_backend($1, 20000) AS ended',
        [checking],
      );
      expect(ended).toBe(true);
      // The retry runs the check on a new connection: it waits there too.
      await unlessFailed(
        until(async () => {
          const [next] = await lockWaiters(lock, 'pg_proc');
          return next !== undefined && next !== checking;
        }, 'the retried check to wait for pg_proc'),
        starting,
      );
      await lock.release();

      const target = await starting;
      expect(log.checks).toEqual([
        retried('57P01 terminating connection due to administrator command'),
      ]);
      await expectIdempotent(target, 'ended-1');
    });

    it('retries the check when its connection is cut while it opens (a server restarting), then starts and answers: 201, then a replay', async () => {
      const db = await database();
      const gate = await new TcpGate(db.url).start();
      opened.push(() => gate.stop());
      const moduleRef = await compile(gate.url);
      // The pool's connection drops, and new ones wait at the gate: the
      // check opens one, which the test cuts.
      gate.close();
      gate.cut();
      const pool = poolOf(moduleRef);
      await until(
        async () => pool.totalCount === 0,
        'the pool to drop its connection',
      );
      const log = new ModuleLog();
      const starting = inFlight(start(moduleRef, platform, db, log));
      await unlessFailed(gate.reached(1), starting);
      gate.cut();
      // The retry opens another connection.
      await unlessFailed(gate.reached(2), starting);
      gate.open();

      const target = await starting;
      expect(log.checks).toEqual([
        retried('Connection terminated unexpectedly'),
      ]);
      await expectIdempotent(target, 'cut-1');
    });
  });

  describe('a database that cannot serve the module', () => {
    it('fails at once with the configuration error when the migrations did not run: no retry', async () => {
      const db = await database();
      const moduleRef = await compile(db.url, {
        migrations: [],
        migrationsRun: false,
      });
      const log = new ModuleLog();
      await expect(start(moduleRef, 'express', db, log)).rejects.toThrow(
        IdempotencyConfigurationError,
      );
      expect(log.checks).toEqual([]);
    });

    it("fails at once with the server's error when the database refuses new connections: no retry", async () => {
      const db = await database();
      const moduleRef = await compile(db.url);
      const name = new URL(db.url).pathname.slice(1);
      await onServer(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS false`);
      // The pool's connection goes: the check needs a new one.
      for (const { pid } of await sessions(db)) {
        await terminateBackend(db, pid);
      }
      const pool = poolOf(moduleRef);
      await until(
        async () => pool.totalCount === 0,
        'the pool to drop its connection',
      );
      const log = new ModuleLog();
      await expect(start(moduleRef, 'express', db, log)).rejects.toThrow(
        `database "${name}" is not currently accepting connections`,
      );
      expect(log.checks).toEqual([]);
    });
  });
});
