import {
  Column,
  CreateDateColumn,
  Entity,
  PrimaryGeneratedColumn,
} from 'typeorm';

/** A payment booked by the fault matrix's handler, one per request. */
@Entity('payments')
export class Payment {
  @PrimaryGeneratedColumn()
  id!: number;

  /** The request's own reference (the cell's key). */
  @Column('text')
  reference!: string;

  @Column('integer')
  amount!: number;

  /** The gateway's charge it books; `null` for a payment never charged. */
  @Column('text', { name: 'charge_id', nullable: true })
  chargeId!: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}
