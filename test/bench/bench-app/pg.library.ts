import {
  PgIdempotencyAdapter,
  type PgTransaction,
} from 'nestjs-idempotency/pg';
import type { Pool, PoolClient } from 'pg';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { BENCH_POOL, OWN_POOL } from './bench-pool.js';
import {
  aloneBooking,
  moduleBooking,
  type DataLibrary,
} from './data-library.js';
import { paymentRows, type PaymentRow } from './payment-rows.js';

const INSERT_PAYMENT = `INSERT INTO payments (amount, currency, merchant_id, charge_id)
  VALUES ($1, $2, $3, $4)
  RETURNING id, amount, currency, merchant_id AS "merchantId",
    charge_id AS "chargeId", created_at AS "createdAt"`;
const INSERT_LEDGER = `INSERT INTO ledger_entries (payment_id, account, direction, amount)
  VALUES ($1, $2, $3, $4), ($5, $6, $7, $8)`;

/** The payment of a charge and its ledger rows, in `tx`: two statements. */
async function write(
  tx: PgTransaction,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<PaymentRow> {
  const { payment: values, ledger } = paymentRows(dto, chargeId);
  const {
    rows: [payment],
  } = await tx.query<PaymentRow>(INSERT_PAYMENT, [
    values.amount,
    values.currency,
    values.merchantId,
    values.chargeId,
  ]);
  await tx.query(
    INSERT_LEDGER,
    ledger(payment.id).flatMap((entry) => [
      entry.paymentId,
      entry.account,
      entry.direction,
      entry.amount,
    ]),
  );
  return payment;
}

/**
 * A transaction on a client of `pool`: `BEGIN`, `fn`, `COMMIT` (`ROLLBACK`
 * on an error), as node-postgres's guide writes one.
 */
async function inTransaction<T>(
  pool: Pool,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

/** node-postgres: the application's `pg.Pool`, and SQL written by hand. */
export const pgLibrary: DataLibrary = {
  providers: OWN_POOL,
  alone: aloneBooking<Pool, PgTransaction>(BENCH_POOL, inTransaction, write),
  module: moduleBooking(write),
  adapter: new PgIdempotencyAdapter({ poolToken: BENCH_POOL }),
};
