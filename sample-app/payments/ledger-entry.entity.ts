import {
  Column,
  Entity,
  JoinColumn,
  ManyToOne,
  PrimaryGeneratedColumn,
  type Relation,
} from 'typeorm';
import { Payment } from './payment.entity.js';

/** One side of a double-entry booking: every payment debits and credits. */
@Entity('ledger_entries')
export class LedgerEntry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column('uuid', { name: 'payment_id' })
  paymentId!: string;

  // `Relation<>` keeps the circular import between the two entities out of
  // the decorator metadata, which ES modules would evaluate too early.
  @ManyToOne(() => Payment, (payment) => payment.ledgerEntries)
  @JoinColumn({ name: 'payment_id' })
  payment?: Relation<Payment>;

  @Column('text')
  account!: string;

  @Column('text')
  direction!: 'debit' | 'credit';

  @Column('integer')
  amount!: number;
}
