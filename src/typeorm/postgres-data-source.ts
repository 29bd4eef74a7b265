import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../exceptions/idempotency-configuration.error.js';

/**
 * @internal Refuses a DataSource that is not PostgreSQL (TypeORM `type:
 * 'postgres'`). The module calls it at bootstrap and every shipped migration
 * before its first statement, so that both refuse another database with the
 * same error, and a migration never sends PostgreSQL's SQL to another server.
 *
 * Only `'postgres'` passes. `'aurora-postgres'` goes through the RDS Data API
 * instead of the `pg` driver whose pool and sessions the module uses (Aurora
 * PostgreSQL reached with `type: 'postgres'` passes), and `'cockroachdb'` is
 * another engine, on which the module's PL/pgSQL functions and advisory locks
 * are not tested.
 *
 * @throws IdempotencyConfigurationError naming the DataSource's type.
 */
export function assertPostgresDataSource(dataSource: DataSource): void {
  const { type } = dataSource.options;
  if (type !== 'postgres') {
    throw new IdempotencyConfigurationError(
      `IdempotencyModule needs a PostgreSQL DataSource, not "${type}".`,
      "Use TypeOrmModule.forRoot({ type: 'postgres', ... }).",
      'With several DataSources, list `...idempotencyMigrations` only in the `migrations` of the PostgreSQL one, and name it in `IdempotencyModule.forRoot({ dataSource })`.',
      'Pass `toRetry: (error) => !(error instanceof IdempotencyConfigurationError)` to TypeOrmModule.forRoot() (or return it from the factory of forRootAsync()), so that a DataSource with `migrationsRun: true` fails at once instead of retrying this error `retryAttempts` times.',
    );
  }
}
