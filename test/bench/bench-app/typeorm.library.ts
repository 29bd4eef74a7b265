import { Injectable } from '@nestjs/common';
import {
  getDataSourceToken,
  InjectRepository,
  TypeOrmModule,
} from '@nestjs/typeorm';
import type { DataSource, EntityManager, Repository } from 'typeorm';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { LedgerEntry } from '../../../sample-app/payments/ledger-entry.entity.js';
import { Payment } from '../../../sample-app/payments/payment.entity.js';
import { writePayment } from '../../../sample-app/payments/payments.service.js';
import { PaymentsDatabase } from '../../../sample-app/typeorm.options.js';
import { TYPEORM_POOL } from './bench-pool.js';
import {
  aloneBooking,
  type Booking,
  type DataLibrary,
} from './data-library.js';

/** The payment of a charge and its ledger rows, through `manager`'s repositories. */
export function writeThrough(
  manager: EntityManager,
  dto: CreatePaymentDto,
  chargeId: string,
): Promise<Payment> {
  return writePayment(
    manager.getRepository(Payment),
    manager.getRepository(LedgerEntry),
    dto,
    chargeId,
  );
}

/**
 * Under the module's PostgreSQL store: the writes through the injected
 * repositories, which write in the handler's transaction.
 */
@Injectable()
class TypeOrmModuleBooking implements Booking {
  constructor(
    @InjectRepository(Payment) private readonly payments: Repository<Payment>,
    @InjectRepository(LedgerEntry)
    private readonly ledger: Repository<LedgerEntry>,
  ) {}

  book(dto: CreatePaymentDto, chargeId: string): Promise<Payment> {
    return writePayment(this.payments, this.ledger, dto, chargeId);
  }
}

/**
 * TypeORM, as the sample uses it: its DataSource (which runs the sample's
 * migrations and the module's at start-up) and the payments' repositories,
 * through the sample's `writePayment`.
 */
export const typeOrmLibrary: DataLibrary = {
  imports: [PaymentsDatabase, TypeOrmModule.forFeature([Payment, LedgerEntry])],
  providers: [TYPEORM_POOL],
  alone: aloneBooking<DataSource, EntityManager>(
    getDataSourceToken(),
    (dataSource, fn) => dataSource.transaction(fn),
    writeThrough,
  ),
  module: TypeOrmModuleBooking,
};
