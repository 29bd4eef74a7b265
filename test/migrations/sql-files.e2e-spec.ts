import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { MigrationInterface, QueryRunner } from 'typeorm';
import { sqlMigrationsOf } from '../../migrations/idempotency-sql.js';
import {
  idempotencyMigrations,
  idempotencySqlMigrations,
} from '../../migrations/index.js';
import { childEnv, root } from '../package/packed-library.js';
import { assertBuilt } from '../utils/library-build.js';
import { SQL_FOLDER, sqlFileNames } from './sql-schema.js';

/*
 * The committed SQL files (migrations/sql/) are what the TypeORM
 * migrations generate: editing a migration without regenerating them fails
 * here. No database: sql-migrations and sql-drizzle apply them.
 */

const run = promisify(execFile);
const REGENERATE = 'run `npm run migrations:sql` to write them again';

/** The SQL files in `folder`, by name. */
async function filesIn(folder: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  for (const file of (await readdir(folder)).sort()) {
    files.set(file, await readFile(path.join(folder, file), 'utf8'));
  }
  return files;
}

describe('the committed SQL migrations', () => {
  it('are what the TypeORM migrations generate, byte for byte', async () => {
    const generated = await idempotencySqlMigrations();
    const committed = await filesIn(SQL_FOLDER);
    const stale = generated
      .filter(({ fileName, sql }) => committed.get(fileName) !== sql)
      .map(
        ({ name, fileName }) =>
          `migrations/sql/${fileName} is not what ${name} generates: ${REGENERATE}`,
      );
    const names = new Set(generated.map(({ fileName }) => fileName));
    const orphans = [...committed.keys()]
      .filter((file) => !names.has(file))
      .map(
        (file) =>
          `migrations/sql/${file} has no TypeORM migration: ${REGENERATE}`,
      );
    expect([...stale, ...orphans]).toEqual([]);
  });

  it('are named after the TypeORM migrations and their files, in the order of idempotencyMigrations', async () => {
    const generated = await idempotencySqlMigrations();
    expect(generated.map(({ name }) => name)).toEqual(
      idempotencyMigrations.map((Migration) => new Migration().name),
    );
    const sources = (await readdir(path.join(root, 'migrations')))
      .filter((file) => /^\d+-.+\.ts$/.test(file))
      .sort();
    expect(generated.map(({ fileName }) => fileName)).toEqual(
      sources.map((file) => file.replace(/\.ts$/, '.sql')),
    );
    expect(await sqlFileNames()).toEqual(
      generated.map(({ fileName }) => fileName),
    );
    for (const { name, fileName, sql } of generated) {
      expect(sql).toMatch(
        new RegExp(
          `^-- nestjs-idempotency: the TypeORM migration ${name}\n-- \\(migrations/${fileName.replace(/\.sql$/, '.ts')}\\)`,
        ),
      );
    }
  });

  it('are each listed in the migrations guide, with a link', async () => {
    const guide = await readFile(
      path.join(root, 'migrations/README.md'),
      'utf8',
    );
    for (const fileName of await sqlFileNames()) {
      expect(guide).toContain(`(sql/${fileName})`);
    }
  });

  it('are written by `npm run migrations:sql` from the build, which removes a file no migration makes', async () => {
    await assertBuilt();
    const scratch = await mkdtemp(path.join(tmpdir(), 'idempotency-sql-'));
    try {
      await writeFile(path.join(scratch, '0-dropped-migration.sql'), '');
      await run(
        process.execPath,
        [path.join(root, 'test/migrations/sql-write.js'), scratch],
        { env: childEnv() },
      );
      expect(await filesIn(scratch)).toEqual(await filesIn(SQL_FOLDER));
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });

  it('refuse a migration whose statements a plain SQL file cannot hold', async () => {
    const sending = (sql: string, parameters?: unknown[]) =>
      class Sends implements MigrationInterface {
        name = 'Sends1764000009999';
        async up(queryRunner: QueryRunner) {
          await queryRunner.query('SELECT 1');
          await queryRunner.query(sql, parameters);
        }
        async down() {}
      };
    await expect(sqlMigrationsOf([sending('SELECT $1', [1])])).rejects.toThrow(
      'Migration Sends1764000009999 sends a statement with parameters',
    );
    await expect(sqlMigrationsOf([sending('COMMIT')])).rejects.toThrow(
      'sends a transaction command (COMMIT)',
    );
    await expect(
      sqlMigrationsOf([sending('SELECT 1 --> statement-breakpoint')]),
    ).rejects.toThrow('a plain SQL file cannot hold it');
    const [ok] = await sqlMigrationsOf([sending('SELECT 2')]);
    expect(ok.fileName).toBe('1764000009999-sends.sql');
    expect(ok.sql).toMatch(
      /\n\nSELECT 1;\n\n--> statement-breakpoint\n\nSELECT 2;\n$/,
    );
  });
});
