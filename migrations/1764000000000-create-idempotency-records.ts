import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';

/**
 * Creates the idempotency record table (`idempotency_records`) and the index
 * on `expires_at` that garbage collection scans.
 */
export class CreateIdempotencyRecords1764000000000 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'CreateIdempotencyRecords1764000000000';

  /** Creates the table and its index. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`
      CREATE TABLE "idempotency_records" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "fingerprint" text NOT NULL,
        "method" text NOT NULL,
        "path" text NOT NULL,
        "status" text NOT NULL,
        "response_status" smallint,
        "response_headers" jsonb,
        "response_body" bytea,
        "created_at" timestamptz NOT NULL DEFAULT now(),
        "completed_at" timestamptz,
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_records" PRIMARY KEY ("scope", "key"),
        CONSTRAINT "CHK_idempotency_records_status"
          CHECK ("status" IN ('in_progress', 'completed', 'failed', 'not_replayable'))
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_idempotency_records_expires_at" ON "idempotency_records" ("expires_at")`,
    );
  }

  /** Drops the table and its index. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`DROP TABLE "idempotency_records"`);
  }
}
