import { Kysely, PostgresDialect, sql } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import { testPool } from '../utils/test-pool.js';
import {
  idempotencyMigrations,
  idempotencySqlMigrations,
} from '../../migrations/index.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  applyWithPsql,
  migrateWithTypeorm,
  rowsOfFirstSchema,
  schemaOf,
  sqlFileNames,
  writeRowsOfSchema,
  type Schema,
} from './sql-schema.js';

/*
 * The committed SQL files (migrations/sql/), applied with psql as the
 * migrations guide says, make the schema that the TypeORM migrations make:
 * on a fresh database, and from the schema of every earlier release.
 */

describe('the migrations as plain SQL, applied with psql', () => {
  const databases: TestDatabase[] = [];
  const database = async () => {
    const db = await createTestDatabase();
    databases.push(db);
    return db;
  };
  let files: string[];
  /** The schema of every TypeORM migration, run on a fresh database. */
  let reference: Schema;

  beforeAll(async () => {
    files = await sqlFileNames();
    const db = await database();
    await migrateWithTypeorm(db.url);
    reference = await schemaOf(db);
  });
  afterAll(async () => {
    await Promise.all(databases.map((db) => db.drop()));
  });

  it('make on a fresh database the tables, columns, indexes, constraints and functions of the TypeORM migrations', async () => {
    expect(files).toHaveLength(idempotencyMigrations.length);
    const db = await database();
    await applyWithPsql(db.url, files);
    expect(await schemaOf(db)).toEqual(reference);

    expect(reference.relations).toEqual([
      { name: 'idempotency_failures', kind: 'r' },
      { name: 'idempotency_records', kind: 'r' },
      { name: 'idempotency_steps', kind: 'r' },
    ]);
    expect(reference.functions.map((f) => f.name)).toEqual(
      expect.arrayContaining([
        'idempotency_acquire_generation',
        'idempotency_finish',
        'idempotency_release',
        'idempotency_renew',
        'idempotency_save_step',
      ]),
    );
  });

  it('are compared in every part of the schema: a changed default, nullability, index, constraint or function body, or another table, differs', async () => {
    const db = await database();
    await applyWithPsql(db.url, files);
    const [renew] = await db.query<{ definition: string }>(
      `SELECT pg_get_functiondef('idempotency_renew'::regproc) AS definition`,
    );
    const changes: Array<{ part: keyof Schema; change: string; undo: string }> =
      [
        {
          part: 'columns',
          change: `ALTER TABLE idempotency_records ALTER COLUMN waiting SET DEFAULT true`,
          undo: `ALTER TABLE idempotency_records ALTER COLUMN waiting SET DEFAULT false`,
        },
        {
          part: 'columns',
          change: `ALTER TABLE idempotency_steps ALTER COLUMN fingerprint SET NOT NULL`,
          undo: `ALTER TABLE idempotency_steps ALTER COLUMN fingerprint DROP NOT NULL`,
        },
        {
          part: 'indexes',
          change: `DROP INDEX "IDX_idempotency_steps_expires_at"`,
          undo: `CREATE INDEX "IDX_idempotency_steps_expires_at" ON idempotency_steps (expires_at)`,
        },
        {
          part: 'constraints',
          change: `ALTER TABLE idempotency_records ADD CONSTRAINT "CHK_idempotency_records_status" CHECK (status <> '')`,
          undo: `ALTER TABLE idempotency_records DROP CONSTRAINT "CHK_idempotency_records_status"`,
        },
        {
          part: 'functions',
          change: renew.definition.replace('RETURN QUERY', 'RETURN  QUERY'),
          undo: renew.definition,
        },
        {
          part: 'relations',
          change: `CREATE TABLE idempotency_extra ()`,
          undo: `DROP TABLE idempotency_extra`,
        },
      ];
    for (const { part, change, undo } of changes) {
      await db.query(change);
      const changed = await schemaOf(db);
      expect({ change, differs: changed[part] }).not.toEqual({
        change,
        differs: reference[part],
      });
      await db.query(undo);
      expect(await schemaOf(db)).toEqual(reference);
    }
  });

  // The first k migrations, for each k from 1 to all but the last (0 is
  // a fresh database; after all of them, no file is left to apply).
  const releasedSchemas = idempotencyMigrations
    .slice(0, -1)
    .map((Migration, index) => ({ count: index + 1, last: Migration.name }));

  it.each(releasedSchemas)(
    'upgrade the schema of the first $count TypeORM migrations (up to $last), one file per psql transaction, to the same schema, keeping its rows',
    async ({ count }) => {
      const db = await database();
      await migrateWithTypeorm(db.url, count);
      await writeRowsOfSchema(db, count);
      const rows = await rowsOfFirstSchema(db);

      for (const file of files.slice(count)) {
        await applyWithPsql(db.url, [file]);
      }
      expect(await schemaOf(db)).toEqual(reference);
      expect(await rowsOfFirstSchema(db)).toEqual(rows);
      // The claim function of this release replays the record.
      expect(
        await db.query(
          `SELECT acquired, status, response_status, convert_from(response_body, 'UTF8') AS body
             FROM idempotency_acquire_generation('global', 'done', 'f', 'POST', '/orders',
               gen_random_uuid(), NULL, 60000, 60000, false)`,
        ),
      ).toEqual([
        {
          acquired: false,
          status: 'completed',
          response_status: 201,
          body: '{"id":1}',
        },
      ]);
    },
  );

  it('apply through a Kysely Migrator of their own, as the guide shows, to the same schema', async () => {
    const db = await database();
    const kysely = new Kysely<unknown>({
      dialect: new PostgresDialect({ pool: testPool(db.url, 10) }),
    });
    try {
      const migrations: Record<string, Migration> = {};
      for (const { fileName, sql: text } of await idempotencySqlMigrations()) {
        migrations[fileName] = {
          up: async (db) => {
            await sql.raw(text).execute(db);
          },
        };
      }
      const migrator = new Migrator({
        db: kysely,
        provider: { getMigrations: () => Promise.resolve(migrations) },
        migrationTableName: 'kysely_idempotency_migration',
        migrationLockTableName: 'kysely_idempotency_migration_lock',
      });
      const { error, results } = await migrator.migrateToLatest();
      expect(error).toBeUndefined();
      expect(results?.map((result) => result.migrationName)).toEqual(files);
    } finally {
      await kysely.destroy();
    }
    expect(await schemaOf(db)).toEqual(reference);
  });
});
