import type { MigrationInterface, QueryRunner } from 'typeorm';

/** One of the module's migrations as a plain SQL file. */
export interface IdempotencySqlMigration {
  /**
   * The TypeORM migration's name, as recorded in TypeORM's migrations
   * table, e.g. `CreateIdempotencyRecords1764000000000`.
   */
  readonly name: string;
  /**
   * The file's name in `migrations/sql/`, after the TypeORM migration's
   * file, e.g. `1764000000000-create-idempotency-records.sql`. The names
   * sort in the order the migrations apply.
   */
  readonly fileName: string;
  /**
   * The file's text: a header comment, then the statements that the
   * migration's `up()` sends, each ended by `;`, with a
   * `--> statement-breakpoint` line between two of them (where drizzle's
   * migrator splits a file). No `BEGIN` or `COMMIT`: the tool that applies
   * the file brings the transaction.
   */
  readonly sql: string;
}

/** The line at which drizzle-orm's migrator splits a migration file. */
const STATEMENT_BREAKPOINT = '--> statement-breakpoint';

/** A statement that would end the transaction the file is applied in. */
const TRANSACTION_CONTROL =
  /^\s*(BEGIN|COMMIT|END|ROLLBACK|START|SAVEPOINT|RELEASE|ABORT)\b/i;

/**
 * @internal The migrations' `up()` statements as SQL files, recorded by a
 * query runner that sends nothing (no database, no TypeORM at run time):
 * the SQL files and the TypeORM migrations are one source. Use
 * `idempotencySqlMigrations()` from `nestjs-idempotency/migrations`.
 *
 * @throws Error when a migration sends a statement that a plain SQL file
 * cannot hold: one with parameters, one that controls the transaction, or
 * one holding drizzle's breakpoint marker.
 */
export async function sqlMigrationsOf(
  migrations: ReadonlyArray<new () => MigrationInterface>,
): Promise<IdempotencySqlMigration[]> {
  const files: IdempotencySqlMigration[] = [];
  for (const Migration of migrations) {
    const migration = new Migration();
    const name = migration.name ?? Migration.name;
    const fileName = `${migrationFileName(name)}.sql`;
    const statements = await statementsOf(name, migration);
    files.push({
      name,
      fileName,
      sql: [
        header(name, fileName),
        statements.join(`\n\n${STATEMENT_BREAKPOINT}\n\n`),
        '',
      ].join('\n'),
    });
  }
  return files;
}

/**
 * The name of a migration's file without its extension:
 * `CreateIdempotencyRecords1764000000000` is in
 * `1764000000000-create-idempotency-records.ts`.
 */
function migrationFileName(name: string): string {
  const parts = /^(\D+)(\d+)$/.exec(name);
  if (!parts) {
    throw new Error(
      `Migration name "${name}" does not end with its timestamp: its SQL file cannot be named after it.`,
    );
  }
  const words = parts[1].replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();
  return `${parts[2]}-${words}`;
}

function header(name: string, fileName: string): string {
  return [
    `-- nestjs-idempotency: the TypeORM migration ${name}`,
    `-- (migrations/${fileName.replace(/\.sql$/, '.ts')}) as plain SQL.`,
    '-- Generated from it by `npm run migrations:sql`: do not edit.',
    '-- Apply it in one transaction, after the files named before it:',
    `--   psql --single-transaction -v ON_ERROR_STOP=1 -f ${fileName}`,
    '',
  ].join('\n');
}

/** The statements `up()` sends, each as the file holds it. */
async function statementsOf(
  name: string,
  migration: MigrationInterface,
): Promise<string[]> {
  const statements: string[] = [];
  const refuse = (reason: string) =>
    new Error(
      `Migration ${name} sends ${reason}: a plain SQL file cannot hold it.`,
    );
  const recorder = {
    dataSource: { options: { type: 'postgres' } },
    query(sql: string, parameters?: unknown[]): Promise<unknown[]> {
      if (parameters?.length) {
        return Promise.reject(refuse('a statement with parameters'));
      }
      if (TRANSACTION_CONTROL.test(sql)) {
        return Promise.reject(refuse(`a transaction command (${sql.trim()})`));
      }
      if (sql.includes(STATEMENT_BREAKPOINT)) {
        return Promise.reject(refuse(`"${STATEMENT_BREAKPOINT}"`));
      }
      // Only whitespace outside the statement goes: a function's body
      // keeps its text, so that the database stores the same source as
      // from the TypeORM migration.
      statements.push(`${sql.replace(/^\s*\n/, '').trimEnd()};`);
      return Promise.resolve([]);
    },
  };
  // The migrations read the DataSource's type and call query() alone.
  await migration.up(recorder as unknown as QueryRunner);
  return statements;
}
