import {
  Inject,
  Injectable,
  type InjectionToken,
  type ModuleMetadata,
  type Provider,
  type Type,
} from '@nestjs/common';
import { IdempotencyContext } from 'nestjs-idempotency';
import type { PostgresAdapter } from 'nestjs-idempotency/store';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import type { PaymentsLibrary } from '../../data-libraries/payments-library.js';

/**
 * How a mode's handler writes the payment of a charge and its two ledger
 * rows, once the charge is back: with which data library, in which
 * transaction. Returns the payment as written.
 */
export interface Booking {
  book(dto: CreatePaymentDto, chargeId: string): Promise<object>;
}

/** Injection token of the mode's {@link Booking}. */
export const Booking = Symbol('Booking');

/**
 * A data library as the modes bench runs the one handler on it: alone (no
 * idempotency, the writes in a transaction of the library's own, begun
 * after the charge, as an application without the module writes them),
 * or under the idempotency module on the library's adapter (the writes in
 * the handler's transaction, which the record commits in).
 */
export interface DataLibrary {
  /** Modules of its client, if any. */
  readonly imports?: ModuleMetadata['imports'];
  /** Providers of its client, and of the pool under `BENCH_POOL`. */
  readonly providers: Provider[];
  /** The writes in the library's own transaction. */
  readonly alone: Type<Booking>;
  /** The writes in the module's transaction of the handler. */
  readonly module: Type<Booking>;
  /** The module's adapter of the library (none: the default, TypeORM). */
  readonly adapter?: PostgresAdapter;
}

/** The payment of a charge and its ledger rows, written in `tx`. */
export type Write<Transaction> = (
  tx: Transaction,
  dto: CreatePaymentDto,
  chargeId: string,
) => Promise<object>;

/**
 * The library alone: `write` in the transaction that `transaction` runs
 * on the application's client (provided under `client`).
 */
export function aloneBooking<Client, Transaction>(
  client: InjectionToken,
  transaction: (
    client: Client,
    fn: (tx: Transaction) => Promise<object>,
  ) => Promise<object>,
  write: Write<Transaction>,
): Type<Booking> {
  @Injectable()
  class AloneBooking implements Booking {
    constructor(@Inject(client) private readonly client: Client) {}

    book(dto: CreatePaymentDto, chargeId: string): Promise<object> {
      return transaction(this.client, (tx) => write(tx, dto, chargeId));
    }
  }
  return AloneBooking;
}

/**
 * Under the module on the library's adapter: `write` in the handler's
 * transaction, `IdempotencyContext<Transaction>.transaction`.
 */
export function moduleBooking<Transaction>(
  write: Write<Transaction>,
): Type<Booking> {
  @Injectable()
  class ModuleBooking implements Booking {
    constructor(
      private readonly idempotency: IdempotencyContext<Transaction>,
    ) {}

    book(dto: CreatePaymentDto, chargeId: string): Promise<object> {
      return write(this.idempotency.transaction, dto, chargeId);
    }
  }
  return ModuleBooking;
}

/**
 * The modes of a data library other than TypeORM
 * (test/data-libraries/): its client on a pool of the application's own,
 * its writes alone or in the module's transaction, its adapter.
 */
export function benchLibrary<Client, Transaction>(
  library: PaymentsLibrary<Client, Transaction>,
): DataLibrary {
  return {
    providers: library.providers,
    alone: aloneBooking<Client, Transaction>(
      library.client,
      (client, fn) => library.transaction(client, fn),
      library.write,
    ),
    module: moduleBooking(library.write),
    adapter: library.adapter(),
  };
}
