import { Kysely, PostgresDialect, type Generated } from 'kysely';
import {
  KyselyIdempotencyAdapter,
  type KyselyTransaction,
} from 'nestjs-idempotency/kysely';
import type { Pool } from 'pg';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { BENCH_POOL, OWN_POOL } from './bench-pool.js';
import {
  aloneBooking,
  moduleBooking,
  type DataLibrary,
} from './data-library.js';
import { paymentRows, type PaymentRow } from './payment-rows.js';

/** The sample's tables (its migrations make them), as Kysely types them. */
interface Database {
  payments: {
    id: Generated<string>;
    amount: number;
    currency: string;
    merchant_id: string;
    charge_id: string | null;
    created_at: Generated<Date>;
  };
  ledger_entries: {
    id: Generated<number>;
    payment_id: string;
    account: string;
    direction: 'debit' | 'credit';
    amount: number;
  };
}

const KYSELY = Symbol('KYSELY');

/** The payment of a charge and its ledger rows, in `trx`: two inserts. */
async function write(
  trx: KyselyTransaction<Database>,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<PaymentRow> {
  const rows = paymentRows(dto, chargeId);
  const payment = await trx
    .insertInto('payments')
    .values({
      amount: rows.payment.amount,
      currency: rows.payment.currency,
      merchant_id: rows.payment.merchantId,
      charge_id: rows.payment.chargeId,
    })
    .returning([
      'id',
      'amount',
      'currency',
      'merchant_id as merchantId',
      'charge_id as chargeId',
      'created_at as createdAt',
    ])
    .executeTakeFirstOrThrow();
  await trx
    .insertInto('ledger_entries')
    .values(
      rows.ledger(payment.id).map((entry) => ({
        payment_id: entry.paymentId,
        account: entry.account,
        direction: entry.direction,
        amount: entry.amount,
      })),
    )
    .execute();
  return payment;
}

/** Kysely with its node-postgres dialect, on the application's pool. */
export const kyselyLibrary: DataLibrary = {
  providers: [
    ...OWN_POOL,
    {
      provide: KYSELY,
      useFactory: (pool: Pool) =>
        new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }),
      inject: [BENCH_POOL],
    },
  ],
  alone: aloneBooking<Kysely<Database>, KyselyTransaction<Database>>(
    KYSELY,
    (db, fn) => db.transaction().execute(fn),
    write,
  ),
  module: moduleBooking(write),
  adapter: new KyselyIdempotencyAdapter({
    kyselyToken: KYSELY,
    poolToken: BENCH_POOL,
  }),
};
