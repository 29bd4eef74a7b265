import type { INestApplication, ModuleMetadata } from '@nestjs/common';
import type { Pool } from 'pg';
import type { PostgresAdapter } from '../../src/stores/index.js';

/**
 * How the payments handler of test/adapters writes, through one data
 * library's handle of the handler's transaction: every method runs one
 * statement in that transaction.
 */
export interface PaymentsWriter {
  /** Inserts a payment, of the gateway's charge `chargeId` if any; returns its id. */
  insertPayment(
    key: string,
    amount: number,
    chargeId?: string | null,
  ): Promise<number>;
  /**
   * Inserts a ledger entry of `paymentId` (a deferred foreign key), on
   * `account` if given.
   */
  insertLedger(
    paymentId: number,
    amount: number,
    account?: string | null,
  ): Promise<void>;
  /** The server process of the transaction's connection. */
  backendPid(): Promise<number>;
  /** Sends `sql` as it is, in the handler's transaction. */
  raw(sql: string): Promise<void>;
}

/** Injection token of the {@link PaymentsWriter}. */
export const PaymentsWriter = Symbol('PaymentsWriter');

/** One data library, as the adapters' suites run it. */
export interface AdapterFixture {
  /** The library's name, as its entry names it: `pg`, `drizzle`, ... */
  readonly name: string;
  /**
   * What the application adds for the library on the database at `url`:
   * the modules and providers of its client, the module's adapter of it
   * (none: the default, TypeORM), and the `PaymentsWriter` provider.
   */
  setUp(url: string): {
    readonly imports?: ModuleMetadata['imports'];
    readonly providers?: ModuleMetadata['providers'];
    readonly adapter?: PostgresAdapter;
  };
  /**
   * The `pg.Pool` that the library's client of `app` writes through (the
   * handler's transactions take their connections from it).
   */
  poolOf(app: INestApplication): Pool;
}
