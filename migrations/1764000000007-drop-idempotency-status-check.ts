import type { MigrationInterface, QueryRunner } from 'typeorm';
import { assertPostgresDataSource } from '../src/typeorm/postgres-data-source.js';

/**
 * Drops the records table's `CHECK` on `status`
 * (`CHK_idempotency_records_status`, of CreateIdempotencyRecords1764000000000).
 * PostgreSQL reads a check constraint's expression anew in every statement
 * that writes the table and plans it there: about 42,000 instructions in
 * each claim and each completion, some 15 % of what the two cost it
 * (test/bench/README.md). Only the module writes `status`, each value one
 * of its own; the store refuses a record whose status it does not know
 * (an error, the request answered 503) instead of reading it as finished.
 *
 * Optional: an instance runs the same with or without it, and instances of
 * the previous versions keep running during a rolling upgrade. It takes
 * the table's lock for an instant (after the transactions using the table
 * at the time); `down()` adds the check again, reading every row.
 */
export class DropIdempotencyStatusCheck1764000000007 implements MigrationInterface {
  /** Migration name, as recorded in TypeORM's migrations table. */
  name = 'DropIdempotencyStatusCheck1764000000007';

  /** Drops the check, if it is there. */
  async up(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(
      `ALTER TABLE "idempotency_records" DROP CONSTRAINT IF EXISTS "CHK_idempotency_records_status"`,
    );
  }

  /** Adds the check again. */
  async down(queryRunner: QueryRunner): Promise<void> {
    assertPostgresDataSource(queryRunner.dataSource);
    await queryRunner.query(
      `ALTER TABLE "idempotency_records" ADD CONSTRAINT "CHK_idempotency_records_status"
        CHECK ("status" IN ('in_progress', 'completed', 'failed', 'not_replayable'))`,
    );
  }
}
