import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type pg from 'pg';

/** The payments table of test/adapters, as Drizzle declares it. */
export const payments = pgTable('payments', {
  id: serial('id').primaryKey(),
  key: text('key').notNull(),
  amount: integer('amount').notNull(),
  chargeId: text('charge_id'),
});

/** The ledger entries of a payment (a deferred foreign key in the table). */
export const ledgerEntries = pgTable('ledger_entries', {
  id: serial('id').primaryKey(),
  paymentId: integer('payment_id').notNull(),
  account: text('account'),
  amount: integer('amount').notNull(),
});

/** The schema given to `drizzle()`: its relational queries are `db.query.payments`. */
export const paymentsSchema = { payments, ledgerEntries };

/** The application's Drizzle database, as `drizzle({ client, schema })` types it. */
export type PaymentsDb = NodePgDatabase<typeof paymentsSchema> & {
  $client: pg.Pool;
};

/** Injection token of the application's {@link PaymentsDb}. */
export const DRIZZLE = Symbol('DRIZZLE');
