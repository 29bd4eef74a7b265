import { eq } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import {
  char,
  integer,
  pgTable,
  serial,
  text,
  timestamp,
  uuid,
} from 'drizzle-orm/pg-core';
import {
  DrizzleIdempotencyAdapter,
  type DrizzleTransaction,
} from 'nestjs-idempotency/drizzle';
import type { Pool } from 'pg';
import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';
import { fromJoin, paymentRows, type PaymentRow } from './payment-rows.js';
import type { PaymentsLibrary } from './payments-library.js';
import { OWN_POOL, POOL } from './pool.js';

/** The sample's payments (its migrations make the table). */
const payments = pgTable('payments', {
  id: uuid('id').primaryKey().defaultRandom(),
  amount: integer('amount').notNull(),
  currency: char('currency', { length: 3 }).notNull(),
  merchantId: text('merchant_id').notNull(),
  chargeId: text('charge_id'),
  createdAt: timestamp('created_at', { withTimezone: true })
    .notNull()
    .defaultNow(),
});

/** The sample's ledger entries. */
const ledgerEntries = pgTable('ledger_entries', {
  id: serial('id').primaryKey(),
  paymentId: uuid('payment_id').notNull(),
  account: text('account').notNull(),
  direction: text('direction', { enum: ['debit', 'credit'] }).notNull(),
  amount: integer('amount').notNull(),
});

const schema = { payments, ledgerEntries };

/** The application's Drizzle database. */
type Db = NodePgDatabase<typeof schema> & { $client: Pool };

const DRIZZLE = Symbol('DRIZZLE');

/** The payment of a charge and its ledger rows, in `tx`: two inserts. */
async function write(
  tx: DrizzleTransaction<Db>,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<PaymentRow> {
  const rows = paymentRows(dto, chargeId);
  const [payment] = await tx.insert(payments).values(rows.payment).returning();
  await tx.insert(ledgerEntries).values(rows.ledger(payment.id));
  return payment;
}

/** Drizzle on node-postgres: the application's database, with its schema, on the pool. */
export const drizzlePayments: PaymentsLibrary<Db, DrizzleTransaction<Db>> = {
  name: 'drizzle',
  client: DRIZZLE,
  providers: [
    ...OWN_POOL,
    {
      provide: DRIZZLE,
      useFactory: (pool: Pool): Db => drizzle({ client: pool, schema }),
      inject: [POOL],
    },
  ],
  adapter: (options) =>
    new DrizzleIdempotencyAdapter<Db>({
      ...options,
      drizzleInstanceToken: DRIZZLE,
    }),
  transaction: (db, fn) => db.transaction(fn),
  write,
  async read(db, id) {
    return fromJoin(
      await db
        .select({ payment: payments, entry: ledgerEntries })
        .from(payments)
        .leftJoin(ledgerEntries, eq(ledgerEntries.paymentId, payments.id))
        .where(eq(payments.id, id))
        .orderBy(ledgerEntries.id),
    );
  },
};
