import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';

/** A payment as the handler writes it: the row, without its ledger. */
export interface PaymentRow {
  readonly id: string;
  readonly amount: number;
  readonly currency: string;
  readonly merchantId: string;
  readonly chargeId: string | null;
  readonly createdAt: Date;
}

/** A ledger row, as the sample's `LedgerEntry` answers it. */
export interface LedgerRow {
  readonly id: number;
  readonly paymentId: string;
  readonly account: string;
  readonly direction: 'debit' | 'credit';
  readonly amount: number;
}

/**
 * A payment read back with its ledger rows (by id), in the shape and
 * order of the sample's answer (its `Payment` entity with `ledgerEntries`).
 */
export interface PaymentWithLedger extends PaymentRow {
  readonly ledgerEntries: readonly LedgerRow[];
}

/**
 * The values of the payment of a charge and of its two ledger rows (a
 * debit of the customer, a credit of the merchant), as the sample's
 * `writePayment` saves them: what every data library writes, with its own
 * statements.
 */
export function paymentRows(dto: CreatePaymentDto, chargeId: string) {
  const { amount, currency, merchantId } = dto;
  return {
    payment: { amount, currency, merchantId, chargeId },
    ledger: (paymentId: string) => [
      { paymentId, account: 'customer', direction: 'debit' as const, amount },
      {
        paymentId,
        account: `merchant:${merchantId}`,
        direction: 'credit' as const,
        amount,
      },
    ],
  };
}

/**
 * The sample's answer from `payment` and its ledger rows, the fields in
 * the entities' order (so that every library answers the same bytes).
 */
export function withLedger(
  payment: PaymentRow,
  entries: readonly LedgerRow[],
): PaymentWithLedger {
  const { id, amount, currency, merchantId, chargeId, createdAt } = payment;
  return {
    id,
    amount,
    currency,
    merchantId,
    chargeId,
    createdAt,
    ledgerEntries: entries.map((entry) => ({
      id: entry.id,
      paymentId: entry.paymentId,
      account: entry.account,
      direction: entry.direction,
      amount: entry.amount,
    })),
  };
}

/**
 * A payment joined to its ledger rows (`LEFT JOIN`, one row per entry,
 * ordered by the entry's id), as {@link withLedger} answers it; `undefined`
 * when there is no row.
 */
export function fromJoin(
  rows: ReadonlyArray<{
    readonly payment: PaymentRow;
    readonly entry: LedgerRow | null;
  }>,
): PaymentWithLedger | undefined {
  return rows.length === 0
    ? undefined
    : withLedger(
        rows[0].payment,
        rows.flatMap((row) => (row.entry ? [row.entry] : [])),
      );
}

/**
 * A payment joined to a ledger row, flat: the payment's columns and the
 * entry's under the names `entryId`, `account`, `direction`, `entryAmount`
 * (`null` where the payment has no entry).
 */
export interface JoinedRow extends PaymentRow {
  readonly entryId: number | null;
  readonly account: string | null;
  readonly direction: 'debit' | 'credit' | null;
  readonly entryAmount: number | null;
}

/** {@link fromJoin} of flat rows ({@link JoinedRow}). */
export function fromJoinedRows(
  rows: readonly JoinedRow[],
): PaymentWithLedger | undefined {
  return fromJoin(
    rows.map((row) => ({
      payment: row,
      entry:
        row.entryId === null
          ? null
          : {
              id: row.entryId,
              paymentId: row.id,
              account: row.account!,
              direction: row.direction!,
              amount: row.entryAmount!,
            },
    })),
  );
}
