import {
  Column,
  CreateDateColumn,
  Entity,
  OneToMany,
  PrimaryGeneratedColumn,
  type Relation,
} from 'typeorm';
import { LedgerEntry } from './ledger-entry.entity.js';

@Entity('payments')
export class Payment {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  /** In minor units (cents): money never goes through floating point. */
  @Column('integer')
  amount!: number;

  /** ISO 4217 code, e.g. `EUR`. */
  @Column('char', { length: 3 })
  currency!: string;

  @Column('text', { name: 'merchant_id' })
  merchantId!: string;

  /** The gateway's id of the charge behind this payment. */
  @Column('text', { name: 'charge_id', nullable: true })
  chargeId!: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;

  @OneToMany(() => LedgerEntry, (entry) => entry.payment)
  ledgerEntries!: Relation<LedgerEntry>[];
}
