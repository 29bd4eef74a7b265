import type { LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { DataSource, type DataSourceOptions, type Logger } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyModule,
} from '../../src/index.js';
import {
  CreateIdempotencyRecords1764000000000,
  idempotencyMigrations,
} from '../../migrations/index.js';
import { describeWithServer } from '../utils/server.js';
import {
  createMariaDbDatabase,
  MARIADB_URL,
  type MariaDbDatabase,
} from './mariadb.js';

const describeMariaDb = await describeWithServer(
  'MariaDB',
  MARIADB_URL.hostname,
  Number(MARIADB_URL.port || 3306),
);

const MIGRATION_NAMES = idempotencyMigrations.map(
  (migration) => migration.name,
);

/** The refusal, whoever makes it: the module or one of its migrations. */
function refusal(type: string): RegExp {
  return new RegExp(
    `^IdempotencyModule needs a PostgreSQL DataSource, not "${type}"\\.\nPotential solutions:\n.*toRetry`,
    's',
  );
}

/** A TypeORM logger that records every statement sent to the server. */
function recordStatements(statements: string[]): Logger {
  return {
    logQuery: (query) => statements.push(query),
    logQueryError: () => undefined,
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
}

/** A Nest logger that records errors, and keeps the test output quiet. */
function recordErrors(errors: string[]): LoggerService {
  return {
    log: () => undefined,
    warn: () => undefined,
    error: (message: unknown) => errors.push(String(message)),
  };
}

describeMariaDb(
  'shipped migrations on a DataSource that is not PostgreSQL',
  () => {
    let db: MariaDbDatabase;
    beforeEach(async () => {
      db = await createMariaDbDatabase();
    });
    afterEach(async () => {
      await db.drop();
    });

    describe.each(['mariadb', 'mysql'] as const)('type "%s"', (type) => {
      let dataSource: DataSource;
      const statements: string[] = [];
      beforeEach(async () => {
        statements.length = 0;
        dataSource = new DataSource({
          type,
          url: db.url,
          migrations: idempotencyMigrations,
          logger: recordStatements(statements),
        } as DataSourceOptions);
        await dataSource.initialize();
      });
      afterEach(async () => {
        await dataSource.destroy();
      });

      it('runMigrations() refuses with the configuration error naming the driver, before any statement of its own: no table, no function, no row in the migrations table', async () => {
        const running = dataSource.runMigrations();
        await expect(running).rejects.toBeInstanceOf(
          IdempotencyConfigurationError,
        );
        await expect(running).rejects.toThrow(refusal(type));

        expect(statements.join('\n')).not.toMatch(/idempotency_/i);
        // TypeORM creates its own table before running any migration.
        expect(await db.tables()).toEqual(['migrations']);
        expect(await db.query(`SELECT name FROM migrations`)).toEqual([]);
        expect(
          await db.query(
            `SELECT routine_name FROM information_schema.routines
           WHERE routine_schema = DATABASE()`,
          ),
        ).toEqual([]);
      });

      it('undoLastMigration() and every down() and up() refuse without sending a statement of their own', async () => {
        // A migrations table that says ours ran (e.g. copied from PostgreSQL).
        await db.query(
          `CREATE TABLE migrations (id int AUTO_INCREMENT PRIMARY KEY,
           timestamp bigint NOT NULL, name varchar(255) NOT NULL)`,
        );
        for (const name of MIGRATION_NAMES) {
          await db.query(
            `INSERT INTO migrations (timestamp, name) VALUES (?, ?)`,
            [Number(name.slice(-13)), name],
          );
        }
        await expect(dataSource.undoLastMigration()).rejects.toThrow(
          refusal(type),
        );

        const queryRunner = dataSource.createQueryRunner();
        try {
          for (const Migration of idempotencyMigrations) {
            await expect(new Migration().down(queryRunner)).rejects.toThrow(
              refusal(type),
            );
            await expect(new Migration().up(queryRunner)).rejects.toThrow(
              refusal(type),
            );
          }
        } finally {
          await queryRunner.release();
        }

        expect(statements.join('\n')).not.toMatch(/idempotency_/i);
        expect(await db.tables()).toEqual(['migrations']);
        const rows = await db.query<{ name: string }>(
          `SELECT name FROM migrations ORDER BY id`,
        );
        expect(rows.map((row) => row.name)).toEqual(MIGRATION_NAMES);
      });
    });

    describe('TypeOrmModule with migrationsRun: true and IdempotencyModule', () => {
      /**
       * Compiles an application on the MariaDB database, counting the
       * DataSources @nestjs/typeorm creates: one per attempt.
       */
      async function bootstrap(typeorm: Partial<TypeOrmModuleOptions>) {
        const attempts = { count: 0 };
        const errors: string[] = [];
        const statements: string[] = [];
        const compiling = Test.createTestingModule({
          imports: [
            TypeOrmModule.forRootAsync({
              useFactory: () =>
                ({
                  type: 'mariadb',
                  url: db.url,
                  migrations: idempotencyMigrations,
                  migrationsRun: true,
                  retryDelay: 0,
                  logger: recordStatements(statements),
                  ...typeorm,
                }) as TypeOrmModuleOptions,
              dataSourceFactory: (options) => {
                attempts.count += 1;
                return Promise.resolve(new DataSource(options!));
              },
            }),
            IdempotencyModule.forRoot(),
          ],
        })
          .setLogger(recordErrors(errors))
          .compile();
        const failure = await compiling.then(
          () => undefined,
          (error: unknown) => error,
        );
        expect(statements.join('\n')).not.toMatch(/idempotency_/i);
        expect(await db.tables()).toEqual(['migrations']);
        return { failure, attempts: attempts.count, errors };
      }

      it('fails at bootstrap with the configuration error, not an SQL error, after @nestjs/typeorm retried it retryAttempts times', async () => {
        const { failure, attempts, errors } = await bootstrap({
          retryAttempts: 3,
        });
        expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
        expect((failure as Error).message).toMatch(refusal('mariadb'));
        expect(attempts).toBe(3);
        expect(errors).toEqual([
          'Unable to connect to the database. Retrying (1)...',
          'Unable to connect to the database. Retrying (2)...',
          'Unable to connect to the database. Retrying (3)...',
        ]);
      });

      it('fails at the first attempt when toRetry (as the error suggests) excludes IdempotencyConfigurationError', async () => {
        const { failure, attempts, errors } = await bootstrap({
          toRetry: (error: unknown) =>
            !(error instanceof IdempotencyConfigurationError),
        });
        expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
        expect((failure as Error).message).toMatch(refusal('mariadb'));
        expect(attempts).toBe(1);
        expect(errors).toEqual([]);
      });
    });

    it("IdempotencyModule refuses a MariaDB DataSource (no migrations) with the migrations' message", async () => {
      const moduleRef = await Test.createTestingModule({
        imports: [
          TypeOrmModule.forRoot({
            type: 'mariadb',
            url: db.url,
            logger: recordStatements([]),
          }),
          IdempotencyModule.forRoot(),
        ],
      })
        .setLogger(recordErrors([]))
        .compile();
      try {
        const initialising = moduleRef.init();
        await expect(initialising).rejects.toBeInstanceOf(
          IdempotencyConfigurationError,
        );
        const fromModule = await initialising.catch(
          (error: Error) => error.message,
        );

        const queryRunner = moduleRef.get(DataSource).createQueryRunner();
        const fromMigration = await new CreateIdempotencyRecords1764000000000()
          .up(queryRunner)
          .catch((error: Error) => error.message)
          .finally(() => queryRunner.release());
        expect(fromModule).toMatch(refusal('mariadb'));
        expect(fromMigration).toBe(fromModule);
      } finally {
        await moduleRef.close();
      }
      expect(await db.tables()).toEqual([]);
    });
  },
);
