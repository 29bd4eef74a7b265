import type { MigrationInterface, QueryRunner } from 'typeorm';

/** Keeps the gateway's charge id on each payment. */
export class AddChargeId1764000000101 implements MigrationInterface {
  name = 'AddChargeId1764000000101';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE "payments" ADD COLUMN "charge_id" text`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "payments" DROP COLUMN "charge_id"`);
  }
}
