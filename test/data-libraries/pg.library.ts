import {
  PgIdempotencyAdapter,
  type PgTransaction,
} from 'nestjs-idempotency/pg';
import type { Pool, PoolClient } from 'pg';
import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';
import {
  fromJoinedRows,
  paymentRows,
  type JoinedRow,
  type PaymentRow,
} from './payment-rows.js';
import type { PaymentsLibrary } from './payments-library.js';
import { OWN_POOL, POOL } from './pool.js';

const INSERT_PAYMENT = `INSERT INTO payments (amount, currency, merchant_id, charge_id)
  VALUES ($1, $2, $3, $4)
  RETURNING id, amount, currency, merchant_id AS "merchantId",
    charge_id AS "chargeId", created_at AS "createdAt"`;
const INSERT_LEDGER = `INSERT INTO ledger_entries (payment_id, account, direction, amount)
  VALUES ($1, $2, $3, $4), ($5, $6, $7, $8)`;
/** The payment and its ledger rows, one row per entry. */
const SELECT_PAYMENT = `SELECT p.id, p.amount, p.currency, p.merchant_id AS "merchantId",
    p.charge_id AS "chargeId", p.created_at AS "createdAt", l.id AS "entryId",
    l.account, l.direction, l.amount AS "entryAmount"
  FROM payments p LEFT JOIN ledger_entries l ON l.payment_id = p.id
  WHERE p.id = $1 ORDER BY l.id`;

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
export const pgPayments: PaymentsLibrary<Pool, PgTransaction> = {
  name: 'pg',
  client: POOL,
  providers: OWN_POOL,
  adapter: (options) =>
    new PgIdempotencyAdapter({ ...options, poolToken: POOL }),
  transaction: inTransaction,
  write,
  async read(db, id) {
    const { rows } = await db.query<JoinedRow>(SELECT_PAYMENT, [id]);
    return fromJoinedRows(rows);
  },
};
