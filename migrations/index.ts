import { CreateIdempotencyRecords1764000000000 } from './1764000000000-create-idempotency-records.js';
import { CreateIdempotencySteps1764000000001 } from './1764000000001-create-idempotency-steps.js';
import { CreateIdempotencyFunctions1764000000002 } from './1764000000002-create-idempotency-functions.js';
import { LeaseIdempotencyClaims1764000000003 } from './1764000000003-lease-idempotency-claims.js';
import { BindIdempotencySteps1764000000004 } from './1764000000004-bind-idempotency-steps.js';
import { KeepIdempotencyGenerations1764000000005 } from './1764000000005-keep-idempotency-generations.js';
import { CountIdempotencyFailures1764000000006 } from './1764000000006-count-idempotency-failures.js';
import { DropIdempotencyStatusCheck1764000000007 } from './1764000000007-drop-idempotency-status-check.js';
import {
  sqlMigrationsOf,
  type IdempotencySqlMigration,
} from './idempotency-sql.js';

export {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
} from '../src/idempotency.constants.js';

export type { IdempotencySqlMigration } from './idempotency-sql.js';

export {
  CreateIdempotencyRecords1764000000000,
  CreateIdempotencySteps1764000000001,
  CreateIdempotencyFunctions1764000000002,
  LeaseIdempotencyClaims1764000000003,
  BindIdempotencySteps1764000000004,
  KeepIdempotencyGenerations1764000000005,
  CountIdempotencyFailures1764000000006,
  DropIdempotencyStatusCheck1764000000007,
};

/**
 * The module's TypeORM migrations, in order. Add them to the DataSource's
 * `migrations` and run them with the TypeORM CLI or `migrationsRun: true`.
 * On a DataSource that is not PostgreSQL, each of them (`up` and `down`)
 * throws the module's `IdempotencyConfigurationError` before any statement.
 *
 * @example
 * TypeOrmModule.forRoot({
 *   type: 'postgres',
 *   url,
 *   migrations: [...idempotencyMigrations, ...ownMigrations],
 *   migrationsRun: true,
 * })
 */
export const idempotencyMigrations = [
  CreateIdempotencyRecords1764000000000,
  CreateIdempotencySteps1764000000001,
  CreateIdempotencyFunctions1764000000002,
  LeaseIdempotencyClaims1764000000003,
  BindIdempotencySteps1764000000004,
  KeepIdempotencyGenerations1764000000005,
  CountIdempotencyFailures1764000000006,
  DropIdempotencyStatusCheck1764000000007,
];

/**
 * The same migrations as plain SQL, in order, for applications without
 * TypeORM (Prisma, Drizzle, Kysely, `pg`): per migration, its name, its
 * file name and the statements its `up()` sends, recorded without a
 * database. The package ships them as files, `migrations/sql/*.sql`
 * (`npm run migrations:sql` writes them); how to apply them with psql,
 * Prisma Migrate or drizzle-kit is in `migrations/README.md`.
 *
 * @example
 * // Applies the files a database has not had yet, each in a transaction.
 * for (const { fileName, sql } of await idempotencySqlMigrations()) {
 *   if (!applied.has(fileName)) {
 *     await client.query('BEGIN');
 *     await client.query(sql);
 *     await client.query('INSERT INTO my_migrations (name) VALUES ($1)', [fileName]);
 *     await client.query('COMMIT');
 *   }
 * }
 */
export function idempotencySqlMigrations(): Promise<IdempotencySqlMigration[]> {
  return sqlMigrationsOf(idempotencyMigrations);
}
