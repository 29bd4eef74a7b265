import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import {
  PrismaIdempotencyAdapter,
  type PrismaTransaction,
} from 'nestjs-idempotency/prisma';
import type { Pool } from 'pg';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { PrismaClient } from '../prisma/generated/client.js';
import { BENCH_POOL, OWN_POOL } from './bench-pool.js';
import {
  aloneBooking,
  moduleBooking,
  type DataLibrary,
} from './data-library.js';
import { paymentRows, type PaymentRow } from './payment-rows.js';

/** The application's client: Prisma on `PrismaPg` given the pool. */
@Injectable()
class PrismaService extends PrismaClient implements OnApplicationShutdown {
  constructor(@Inject(BENCH_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  onApplicationShutdown(): Promise<void> {
    return this.$disconnect();
  }
}

/** The payment of a charge and its ledger rows, in `tx`: two inserts. */
async function write(
  tx: PrismaTransaction<PrismaService>,
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
 * client generated from the sample's tables (../prisma/schema.prisma).
 */
export const prismaLibrary: DataLibrary = {
  providers: [...OWN_POOL, PrismaService],
  alone: aloneBooking<PrismaService, PrismaTransaction<PrismaService>>(
    PrismaService,
    (prisma, fn) => prisma.$transaction(fn),
    write,
  ),
  module: moduleBooking(write),
  adapter: new PrismaIdempotencyAdapter({ prismaToken: PrismaService }),
};
