import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';

/**
 * Failed attempts of keys: a message handler with `maxAttempts`
 * hands a message that keeps failing to its dead-letter path, after a
 * number of failures counted here, in a row per key that outlives the
 * claim's release (which deletes the record) and the record itself. A row
 * lasts until its `expires_at` (the route's `ttl` after the key's last
 * failure), when garbage collection deletes it.
 *
 * Adds a table and its index, and changes nothing else: instances of the
 * previous version keep running during a rolling upgrade.
 */
export class CountIdempotencyFailures1764000000006 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'CountIdempotencyFailures1764000000006';

  /** Creates the table and its index. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`
      CREATE TABLE "idempotency_failures" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "failures" integer NOT NULL,
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_failures" PRIMARY KEY ("scope", "key")
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_idempotency_failures_expires_at" ON "idempotency_failures" ("expires_at")`,
    );
  }

  /** Drops the table and its index. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`DROP TABLE "idempotency_failures"`);
  }
}
