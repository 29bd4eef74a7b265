import type { InjectionToken, Provider } from '@nestjs/common';
import type {
  PostgresAdapter,
  PostgresAdapterOptions,
} from 'nestjs-idempotency/store';
import type { CreatePaymentDto } from '../../sample-app/payments/create-payment.dto.js';
import type { PaymentRow, PaymentWithLedger } from './payment-rows.js';

/**
 * The sample's payment writes and read-back with one data library other
 * than TypeORM, on the sample's tables (its migrations make them), in an
 * application without TypeORM: the client on a pool of its own, the
 * idempotency module's adapter of the library, the library's own
 * transaction, and the statements. The modes bench and the soak's
 * instances build their applications from it.
 */
export interface PaymentsLibrary<Client, Transaction> {
  /** `pg`, `drizzle`, `kysely` or `prisma`. */
  readonly name: LibraryName;
  /** Injection token of the application's client (a pool, a database). */
  readonly client: InjectionToken;
  /** Providers of the pool (`POOL`, pool.ts) and of the client. */
  readonly providers: Provider[];
  /** The module's adapter of the library, with `options`. */
  adapter(options?: PostgresAdapterOptions): PostgresAdapter<Transaction>;
  /** Runs `fn` in a transaction of the library's own on `client`. */
  transaction<T>(
    client: Client,
    fn: (tx: Transaction) => Promise<T>,
  ): Promise<T>;
  /**
   * Writes the payment of a charge and its ledger rows in `tx` and returns
   * the payment as written.
   */
  write(
    tx: Transaction,
    dto: CreatePaymentDto,
    chargeId: string,
  ): Promise<PaymentRow>;
  /**
   * Reads payment `id` with its ledger rows through `db` (a transaction or
   * the client), as the sample answers it; `undefined` when there is none.
   */
  read(
    db: Client | Transaction,
    id: string,
  ): Promise<PaymentWithLedger | undefined>;
}

/** The data libraries other than TypeORM. */
export const LIBRARY_NAMES = ['pg', 'drizzle', 'kysely', 'prisma'] as const;

/** A data library other than TypeORM. */
export type LibraryName = (typeof LIBRARY_NAMES)[number];

/** Whether `name` is one of {@link LIBRARY_NAMES}. */
export function isLibraryName(name: string): name is LibraryName {
  return (LIBRARY_NAMES as readonly string[]).includes(name);
}

/**
 * Library `name`, imported only when asked for (an application loads only
 * its own library).
 */
export async function loadLibrary(
  name: LibraryName,
): Promise<PaymentsLibrary<unknown, unknown>> {
  switch (name) {
    case 'pg':
      return (await import('./pg.library.js')).pgPayments;
    case 'drizzle':
      return (await import('./drizzle.library.js')).drizzlePayments;
    case 'kysely':
      return (await import('./kysely.library.js')).kyselyPayments;
    case 'prisma':
      return (await import('./prisma.library.js')).prismaPayments;
  }
}
