import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The payment intents Stripe confirmed, one row per intent. */
export class CreatePaymentConfirmations1764000000102 implements MigrationInterface {
  name = 'CreatePaymentConfirmations1764000000102';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE "payment_confirmations" (
        "payment_intent_id" text PRIMARY KEY,
        "event_id" text NOT NULL,
        "payment_id" uuid REFERENCES "payments" ("id"),
        "amount" integer NOT NULL,
        "currency" char(3) NOT NULL,
        "confirmed_at" timestamptz NOT NULL DEFAULT now()
      )
    `);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE "payment_confirmations"`);
  }
}
