import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import type { QueryRunner } from 'typeorm';
import { idempotencyMigrations } from '../../migrations/index.js';
import { childEnv, root } from '../package/packed-library.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  migrateWithTypeorm,
  rowsOfFirstSchema,
  schemaOf,
  SQL_FOLDER,
  sqlFileNames,
  writeRowsOfSchema,
} from './sql-schema.js';

/*
 * The committed SQL files as drizzle-kit custom migrations, the way the
 * migrations guide says: `drizzle-kit generate --custom` makes an empty
 * migration, the file's text goes in it, `drizzle-kit migrate` applies it.
 * Both run as child processes, offline, with a config file of the test's.
 */

const run = promisify(execFile);
const DRIZZLE_KIT = path.join(root, 'node_modules/drizzle-kit/bin.cjs');

/** The number of statements each migration's `up()` sends. */
async function statementCounts(): Promise<number[]> {
  const counts: number[] = [];
  for (const Migration of idempotencyMigrations) {
    let count = 0;
    const counter = {
      dataSource: { options: { type: 'postgres' } },
      query: () => Promise.resolve([(count += 1)]),
    };
    await new Migration().up(counter as unknown as QueryRunner);
    counts.push(count);
  }
  return counts;
}

describe('the migrations as plain SQL, as drizzle-kit custom migrations', () => {
  let scratch: string;
  const databases: TestDatabase[] = [];
  const database = async () => {
    const db = await createTestDatabase();
    databases.push(db);
    return db;
  };

  beforeAll(async () => {
    scratch = await mkdtemp(path.join(tmpdir(), 'idempotency-drizzle-'));
  });
  afterAll(async () => {
    await Promise.all(databases.map((db) => db.drop()));
    await rm(scratch, { recursive: true, force: true });
  });

  /** Runs drizzle-kit in the scratch folder, with its config file. */
  const drizzleKit = async (...args: string[]) => {
    try {
      await run(
        process.execPath,
        [DRIZZLE_KIT, ...args, '--config', 'drizzle.config.mjs'],
        { cwd: scratch, env: childEnv() },
      );
    } catch (error) {
      const { stdout, stderr } = error as { stdout?: string; stderr?: string };
      throw new Error(
        `drizzle-kit ${args.join(' ')} failed:\n${stdout}\n${stderr}`,
        { cause: error },
      );
    }
  };
  const journal = async () =>
    JSON.parse(
      await readFile(path.join(scratch, 'drizzle/meta/_journal.json'), 'utf8'),
    ) as { entries: Array<{ tag: string; breakpoints: boolean }> };
  /** `drizzle-kit generate --custom`, then the file's text in its migration. */
  const addCustomMigration = async (file: string) => {
    const name = file.replace(/^\d+-|\.sql$/g, '');
    await drizzleKit('generate', '--custom', `--name=${name}`);
    const { entries } = await journal();
    const { tag, breakpoints } = entries[entries.length - 1];
    expect({ tag, breakpoints }).toEqual({
      tag: `${String(entries.length - 1).padStart(4, '0')}_${name}`,
      breakpoints: true,
    });
    await writeFile(
      path.join(scratch, 'drizzle', `${tag}.sql`),
      await readFile(path.join(SQL_FOLDER, file)),
    );
  };

  it('install the first releases with drizzle-kit migrate, then upgrade with the files added later: the schemas of the TypeORM migrations, and the rows kept', async () => {
    const files = await sqlFileNames();
    const installed = 3;
    const [db, typeormInstalled, typeormAll] = await Promise.all([
      database(),
      database(),
      database(),
    ]);
    await migrateWithTypeorm(typeormInstalled.url, installed);
    await migrateWithTypeorm(typeormAll.url);
    await writeFile(path.join(scratch, 'schema.mjs'), 'export {};\n');
    await writeFile(
      path.join(scratch, 'drizzle.config.mjs'),
      `export default ${JSON.stringify({
        schema: './schema.mjs',
        out: './drizzle',
        dialect: 'postgresql',
        dbCredentials: { url: db.url },
      })};\n`,
    );

    for (const file of files.slice(0, installed)) {
      await addCustomMigration(file);
    }
    await drizzleKit('migrate');
    expect(await schemaOf(db)).toEqual(await schemaOf(typeormInstalled));
    await writeRowsOfSchema(db, installed);
    const rows = await rowsOfFirstSchema(db);

    for (const file of files.slice(installed)) {
      await addCustomMigration(file);
    }
    await drizzleKit('migrate');
    expect(await schemaOf(db)).toEqual(await schemaOf(typeormAll));
    expect(await rowsOfFirstSchema(db)).toEqual(rows);

    // drizzle applied each file as it is, one statement at a time.
    const contents = await Promise.all(
      files.map((file) => readFile(path.join(SQL_FOLDER, file))),
    );
    expect(
      await db.query(
        'SELECT hash FROM drizzle.__drizzle_migrations ORDER BY id',
      ),
    ).toEqual(
      contents.map((content) => ({
        hash: createHash('sha256').update(content).digest('hex'),
      })),
    );
    const split = readMigrationFiles({
      migrationsFolder: path.join(scratch, 'drizzle'),
    });
    expect(split.map((migration) => migration.sql.length)).toEqual(
      await statementCounts(),
    );
  }, 300_000);
});
