import { Kysely, PostgresDialect, type Generated } from 'kysely';
import {
  KyselyIdempotencyAdapter,
  type KyselyTransaction,
} from 'nestjs-idempotency/kysely';
import type { Pool } from 'pg';
import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';
import {
  fromJoinedRows,
  paymentRows,
  type PaymentRow,
} from './payment-rows.js';
import type { PaymentsLibrary } from './payments-library.js';
import { OWN_POOL, POOL } from './pool.js';

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
export const kyselyPayments: PaymentsLibrary<
  Kysely<Database>,
  KyselyTransaction<Database>
> = {
  name: 'kysely',
  client: KYSELY,
  providers: [
    ...OWN_POOL,
    {
      provide: KYSELY,
      useFactory: (pool: Pool) =>
        new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }),
      inject: [POOL],
    },
  ],
  adapter: (options) =>
    new KyselyIdempotencyAdapter({
      ...options,
      kyselyToken: KYSELY,
      poolToken: POOL,
    }),
  transaction: (db, fn) => db.transaction().execute(fn),
  write,
  async read(db, id) {
    const rows = await db
      .selectFrom('payments as p')
      .leftJoin('ledger_entries as l', 'l.payment_id', 'p.id')
      .select([
        'p.id',
        'p.amount',
        'p.currency',
        'p.merchant_id as merchantId',
        'p.charge_id as chargeId',
        'p.created_at as createdAt',
        'l.id as entryId',
        'l.account',
        'l.direction',
        'l.amount as entryAmount',
      ])
      .where('p.id', '=', id)
      .orderBy('l.id')
      .execute();
    return fromJoinedRows(rows);
  },
};
