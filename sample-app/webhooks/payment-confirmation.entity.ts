import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/** A payment intent Stripe reported as succeeded. */
@Entity('payment_confirmations')
export class PaymentConfirmation {
  /** Stripe's `pi_...`: one confirmation per intent. */
  @PrimaryColumn('text', { name: 'payment_intent_id' })
  paymentIntentId!: string;

  /** The `evt_...` that reported it. */
  @Column('text', { name: 'event_id' })
  eventId!: string;

  /** The sample's payment, when the intent's metadata names one. */
  @Column('uuid', { name: 'payment_id', nullable: true })
  paymentId!: string | null;

  /** In minor units, as Stripe reports them. */
  @Column('integer')
  amount!: number;

  @Column('char', { length: 3 })
  currency!: string;

  @CreateDateColumn({ name: 'confirmed_at', type: 'timestamptz' })
  confirmedAt!: Date;
}
