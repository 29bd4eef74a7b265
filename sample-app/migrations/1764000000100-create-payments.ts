import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The sample's own tables; the library's migrations create its table. */
export class CreatePayments1764000000100 implements MigrationInterface {
  name = 'CreatePayments1764000000100';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE "payments" (
        "id" uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        "amount" integer NOT NULL CHECK ("amount" > 0),
        "currency" char(3) NOT NULL,
        "merchant_id" text NOT NULL,
        "created_at" timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`
      CREATE TABLE "ledger_entries" (
        "id" serial PRIMARY KEY,
        "payment_id" uuid NOT NULL REFERENCES "payments" ("id"),
        "account" text NOT NULL,
        "direction" text NOT NULL CHECK ("direction" IN ('debit', 'credit')),
        "amount" integer NOT NULL CHECK ("amount" > 0)
      )`);
    await queryRunner.query(
      `CREATE INDEX "IDX_ledger_entries_payment_id" ON "ledger_entries" ("payment_id")`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE "ledger_entries"`);
    await queryRunner.query(`DROP TABLE "payments"`);
  }
}
