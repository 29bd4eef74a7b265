import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** One side of a payment in the ledger: each payment writes two, summing to zero. */
@Entity('ledger_entries')
export class LedgerEntry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column('integer', { name: 'payment_id' })
  paymentId!: number;

  /** `customer` (debited) or `merchant` (credited). */
  @Column('text')
  account!: string;

  @Column('integer')
  amount!: number;
}
