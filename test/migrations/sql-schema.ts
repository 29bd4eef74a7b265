import { execFile } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { DataSource } from 'typeorm';
import { idempotencyMigrations } from '../../migrations/index.js';
import { root } from '../package/packed-library.js';
import type { TestDatabase } from '../utils/test-database.js';

/*
 * What the tests of the migrations as plain SQL share: the committed
 * files, the ways to apply them and the TypeORM migrations, and the
 * schema that both leave, read from the catalogs.
 */

const run = promisify(execFile);

/** The committed SQL files. */
export const SQL_FOLDER = path.join(root, 'migrations/sql');

/** The committed SQL files' names, in the order they apply. */
export async function sqlFileNames(): Promise<string[]> {
  return (await readdir(SQL_FOLDER))
    .filter((file) => file.endsWith('.sql'))
    .sort();
}

/** Runs the first `count` TypeORM migrations, as `migrationsRun` would. */
export async function migrateWithTypeorm(
  url: string,
  count = idempotencyMigrations.length,
): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: idempotencyMigrations.slice(0, count),
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/**
 * Applies the SQL files (names in `migrations/sql/`) as the README says:
 * `psql --single-transaction -v ON_ERROR_STOP=1 -f ...`, all of them in
 * one transaction.
 */
export async function applyWithPsql(
  url: string,
  fileNames: readonly string[],
): Promise<void> {
  const args = ['-X', '-q', '--single-transaction', '-v', 'ON_ERROR_STOP=1'];
  for (const fileName of fileNames) {
    args.push('-f', path.join(SQL_FOLDER, fileName));
  }
  try {
    await run('psql', [...args, '-d', url]);
  } catch (error) {
    const { stderr } = error as { stderr?: string };
    throw new Error(`psql failed on ${fileNames.join(', ')}:\n${stderr}`, {
      cause: error,
    });
  }
}

/**
 * The schema of the database's `public` schema, read from the catalogs,
 * without the tables in which TypeORM and Kysely record the migrations
 * they ran (drizzle keeps its own in the `drizzle` schema). Equal schemas
 * give equal values.
 */
export interface Schema {
  /** Tables, views and sequences, with their kind (`pg_class.relkind`). */
  readonly relations: ReadonlyArray<Record<string, unknown>>;
  /** Per table, in order: name, type, nullability and default. */
  readonly columns: ReadonlyArray<Record<string, unknown>>;
  readonly indexes: ReadonlyArray<Record<string, unknown>>;
  readonly constraints: ReadonlyArray<Record<string, unknown>>;
  /** Each function (overloads apart) and its `pg_get_functiondef`. */
  readonly functions: ReadonlyArray<Record<string, unknown>>;
}

/** TypeORM's migrations table and its sequence, and Kysely's tables. */
const BOOKKEEPING = [
  'migrations',
  'migrations_id_seq',
  'kysely_idempotency_migration',
  'kysely_idempotency_migration_lock',
];

export async function schemaOf(db: TestDatabase): Promise<Schema> {
  const read = (sql: string) => db.query(sql, [BOOKKEEPING]);
  return {
    relations: await read(
      `SELECT c.relname AS name, c.relkind AS kind FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind NOT IN ('i', 'I')
          AND NOT c.relname = ANY($1)
        ORDER BY c.relname COLLATE "C"`,
    ),
    columns: await read(
      `SELECT c.relname AS table, a.attname AS name,
              format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
              pg_get_expr(d.adbin, d.adrelid) AS default
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped AND NOT c.relname = ANY($1)
        ORDER BY c.relname COLLATE "C", a.attnum`,
    ),
    indexes: await read(
      `SELECT tablename AS table, indexname AS name, indexdef AS definition FROM pg_indexes
        WHERE schemaname = 'public' AND NOT tablename = ANY($1)
        ORDER BY indexname COLLATE "C"`,
    ),
    constraints: await read(
      `SELECT conrelid::regclass::text AS table, conname AS name, contype AS type,
              pg_get_constraintdef(oid) AS definition
         FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace AND NOT conrelid::regclass::text = ANY($1)
        ORDER BY conname COLLATE "C"`,
    ),
    functions: await db.query(
      `SELECT proname AS name, pg_get_function_identity_arguments(oid) AS arguments,
              pg_get_functiondef(oid) AS definition
         FROM pg_proc
        WHERE pronamespace = 'public'::regnamespace
        ORDER BY proname COLLATE "C", pg_get_function_identity_arguments(oid) COLLATE "C"`,
    ),
  };
}

/**
 * Writes rows as the version whose schema is the first `count` migrations
 * would: a completed record (through 0.1.0's `idempotency_complete` once
 * it exists, by INSERT before) and a step of another key.
 */
export async function writeRowsOfSchema(
  db: TestDatabase,
  count: number,
): Promise<void> {
  if (count >= 3) {
    await db.query(
      `SELECT idempotency_complete('global', 'done', 'f', 'POST', '/orders', 'completed',
         201, '{"content-type":"application/json"}', convert_to('{"id":1}', 'UTF8'), 3600000)`,
    );
  } else {
    await db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path, status,
         response_status, response_headers, response_body, completed_at, expires_at)
       VALUES ('global', 'done', 'f', 'POST', '/orders', 'completed', 201,
         '{"content-type":"application/json"}', convert_to('{"id":1}', 'UTF8'), now(),
         now() + interval '1 hour')`,
    );
  }
  if (count >= 2) {
    await db.query(
      `INSERT INTO idempotency_steps (scope, key, step, result, expires_at)
       VALUES ('global', 'running', 'charge', '{"id":"ch_1"}', now() + interval '1 hour')`,
    );
  }
}

/** The rows `writeRowsOfSchema()` wrote, in the columns of the first schema. */
export async function rowsOfFirstSchema(db: TestDatabase) {
  const [{ steps }] = await db.query<{ steps: boolean }>(
    `SELECT to_regclass('idempotency_steps') IS NOT NULL AS steps`,
  );
  return {
    records: await db.query(
      `SELECT scope, key, fingerprint, method, path, status, response_status,
              response_headers, response_body, created_at, completed_at, expires_at
         FROM idempotency_records ORDER BY key`,
    ),
    steps: steps
      ? await db.query(
          `SELECT scope, key, step, result, created_at, expires_at
             FROM idempotency_steps ORDER BY key, step`,
        )
      : [],
  };
}
