import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import {
  PrismaIdempotencyAdapter,
  type PrismaTransaction,
} from 'nestjs-idempotency/prisma';
import type { Pool } from 'pg';
import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';
import { PrismaClient } from '../bench/prisma/generated/client.js';
import { paymentRows, withLedger, type PaymentRow } from './payment-rows.js';
import type { PaymentsLibrary } from './payments-library.js';
import { OWN_POOL, POOL } from './pool.js';

/** The application's client: Prisma on `PrismaPg` given the pool. */
@Injectable()
class PrismaService extends PrismaClient implements OnApplicationShutdown {
  constructor(@Inject(POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  onApplicationShutdown(): Promise<void> {
    return this.$disconnect();
  }
}

/** The handler's transaction, as the adapter types it. */
type Tx = PrismaTransaction<PrismaService>;

/** The payment of a charge and its ledger rows, in `tx`: two inserts. */
async function write(
  tx: Tx,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<PaymentRow> {
  const rows = paymentRows(dto, chargeId);
  const payment = await tx.payment.create({ data: rows.payment });
  await tx.ledgerEntry.createMany({ data: rows.ledger(payment.id) });
  return payment;
}

/**
 * Prisma 7 with `@prisma/adapter-pg` on the application's pool, and its
 * client generated from the sample's tables (test/bench/prisma, the modes
 * bench's).
 */
export const prismaPayments: PaymentsLibrary<PrismaService, Tx> = {
  name: 'prisma',
  client: PrismaService,
  providers: [...OWN_POOL, PrismaService],
  adapter: (options) =>
    new PrismaIdempotencyAdapter<PrismaService>({
      ...options,
      prismaToken: PrismaService,
    }),
  transaction: (prisma, fn) => prisma.$transaction(fn),
  write,
  // A client is a transaction handle and more.
  async read(db: Tx, id) {
    const payment = await db.payment.findUnique({
      where: { id },
      include: { ledger: { orderBy: { id: 'asc' } } },
    });
    if (!payment) {
      return undefined;
    }
    const { ledger, ...row } = payment;
    return withLedger(
      row,
      ledger.map((entry) => ({
        ...entry,
        direction: entry.direction as 'debit' | 'credit',
      })),
    );
  },
};
