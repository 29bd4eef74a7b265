import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';

/**
 * Creates the table of recovery points (`idempotency_steps`): the results of
 * the completed steps of requests still in progress.
 */
export class CreateIdempotencySteps1764000000001 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'CreateIdempotencySteps1764000000001';

  /** Creates the table and its index. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`
      CREATE TABLE "idempotency_steps" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "step" text NOT NULL,
        "result" jsonb NOT NULL,
        "created_at" timestamptz NOT NULL DEFAULT now(),
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_steps" PRIMARY KEY ("scope", "key", "step")
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_idempotency_steps_expires_at" ON "idempotency_steps" ("expires_at")`,
    );
  }

  /** Drops the table and its index. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(`DROP TABLE "idempotency_steps"`);
  }
}
