import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The tables of the fault matrix's payments. */
export class CreatePayments1764000000100 implements MigrationInterface {
  name = 'CreatePayments1764000000100';

  async up(queryRunner: QueryRunner): Promise<void> {
    // No unique reference: a payment written twice shows as two rows.
    await queryRunner.query(`
      CREATE TABLE "payments" (
        "id" serial PRIMARY KEY,
        "reference" text NOT NULL,
        "amount" integer NOT NULL,
        "charge_id" text,
        "created_at" timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`
      CREATE TABLE "ledger_entries" (
        "id" serial PRIMARY KEY,
        "payment_id" integer NOT NULL REFERENCES "payments" ("id"),
        "account" text NOT NULL,
        "amount" integer NOT NULL
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE "ledger_entries"`);
    await queryRunner.query(`DROP TABLE "payments"`);
  }
}
