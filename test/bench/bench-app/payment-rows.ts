import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';

/** A payment as the handler answers it: the row written, without its ledger. */
export interface PaymentRow {
  readonly id: string;
  readonly amount: number;
  readonly currency: string;
  readonly merchantId: string;
  readonly chargeId: string | null;
  readonly createdAt: Date;
}

/**
 * The values of the payment of a charge and of its two ledger rows (a
 * debit of the customer, a credit of the merchant), as the sample's
 * `writePayment` saves them: what every data library's mode writes, with
 * its own statements.
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
