import { CreateIdempotencyRecords1764000000000 } from './1764000000000-create-idempotency-records.js';

export { CreateIdempotencyRecords1764000000000 };

/**
 * The module's TypeORM migrations, in order. Add them to the DataSource's
 * `migrations` and run them with the TypeORM CLI or `migrationsRun: true`.
 *
 * @example
 * TypeOrmModule.forRoot({
 *   type: 'postgres',
 *   url,
 *   migrations: [...idempotencyMigrations, ...ownMigrations],
 *   migrationsRun: true,
 * })
 */
export const idempotencyMigrations = [CreateIdempotencyRecords1764000000000];
