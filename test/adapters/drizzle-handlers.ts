import {
  BadRequestException,
  Body,
  Controller,
  Inject,
  Injectable,
  Module,
  Post,
} from '@nestjs/common';
import { count, like, sql, TransactionRollbackError } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { PoolClient } from 'pg';
import { IdempotencyContext, Idempotent } from '../../src/index.js';
import type { DrizzleTransaction } from '../../src/drizzle/index.js';
import type { PgTransaction } from '../../src/pg/index.js';
import { Barrier } from '../utils/barrier.js';
import {
  DRIZZLE,
  ledgerEntries,
  payments,
  paymentsSchema,
  type PaymentsDb,
} from './drizzle.schema.js';

/** The handler's transaction, as the application's code names it. */
type Tx = DrizzleTransaction<PaymentsDb>;

/** The id of the transaction `tx` runs in (assigning one if it has none). */
export async function txid(tx: Pick<Tx, 'execute'>): Promise<string> {
  const { rows } = await tx.execute<{ txid: string }>(
    sql`SELECT txid_current()::text AS txid`,
  );
  return rows[0].txid;
}

/** Where the handlers of {@link DrizzleController} wait for the test. */
@Injectable()
export class DrizzleBarriers {
  /** `/drizzle/parked`, before its first statement. */
  beforeFirst = new Barrier();
  /** `/drizzle/parked`, after it. */
  afterFirst = new Barrier();
  /** `/drizzle/skew` of each key, between its read and its write. */
  readonly skew = new Map<string, Barrier>();

  /** The barrier of `/drizzle/skew` for `key`. */
  skewOf(key: string): Barrier {
    const barrier = this.skew.get(key) ?? new Barrier();
    this.skew.set(key, barrier);
    return barrier;
  }
}

/** Handlers written with Drizzle's typed handle of their transaction. */
@Controller('drizzle')
export class DrizzleController {
  constructor(
    private readonly idempotency: IdempotencyContext<Tx>,
    @Inject(DRIZZLE) private readonly db: PaymentsDb,
    private readonly barriers: DrizzleBarriers,
  ) {}

  /** Waits (a gateway call) before its first statement, and after it. */
  @Post('parked')
  @Idempotent()
  async parked(@Body() { key }: { key: string }) {
    await this.barriers.beforeFirst.wait();
    await this.idempotency.transaction
      .insert(payments)
      .values({ key, amount: 1 });
    await this.barriers.afterFirst.wait();
    return { key };
  }

  /** A payment, a savepoint rolled back, and one released. */
  @Post('savepoints')
  @Idempotent()
  async savepoints(@Body() { key }: { key: string }) {
    const tx = this.idempotency.transaction;
    const [{ id }] = await tx
      .insert(payments)
      .values({ key, amount: 10 })
      .returning({ id: payments.id });
    const declined = await tx
      .transaction(async (savepoint) => {
        await savepoint
          .insert(ledgerEntries)
          .values({ paymentId: id, amount: 99 });
        savepoint.rollback();
      })
      .then(
        () => 'committed',
        (error: unknown) =>
          error instanceof TransactionRollbackError ? 'rolled back' : error,
      );
    const savepoint = await tx.transaction(async (inner) => {
      await inner.insert(ledgerEntries).values({ paymentId: id, amount: 10 });
      return txid(inner);
    });
    return { declined, savepoint, handler: await txid(tx) };
  }

  /** Writes, then rolls the handler's transaction back, Drizzle's way. */
  @Post('rollback')
  @Idempotent()
  async rollback(@Body() { key }: { key: string }) {
    const tx = this.idempotency.transaction;
    await tx.insert(payments).values({ key, amount: 1 });
    tx.rollback();
  }

  /**
   * Writes, then writes in two transactions of their own
   * (`IdempotencyContext.newTransaction`, `db.transaction`), then maybe
   * throws.
   */
  @Post('own')
  @Idempotent()
  async own(@Body() { key, fail }: { key: string; fail?: boolean }) {
    const tx = this.idempotency.transaction;
    await tx.insert(payments).values({ key: `${key}/handler`, amount: 1 });
    const context = await this.idempotency.newTransaction(
      'SERIALIZABLE',
      async (own: Tx) => {
        await own.insert(payments).values({ key: `${key}/context`, amount: 2 });
        const { rows } = await own.execute<{ level: string }>(
          sql`SELECT current_setting('transaction_isolation') AS level`,
        );
        return { txid: await txid(own), level: rows[0].level };
      },
    );
    const db = await this.db.transaction(async (own) => {
      await own.insert(payments).values({ key: `${key}/db`, amount: 3 });
      return txid(own);
    });
    if (fail) {
      throw new BadRequestException('declined after the audits');
    }
    return { handler: await txid(tx), context, db };
  }

  /** Write skew under SERIALIZABLE: reads, waits for the other, writes. */
  @Post('skew')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  async skew(@Body() { key }: { key: string }) {
    const tx = this.idempotency.transaction;
    const [{ before }] = await tx
      .select({ before: count() })
      .from(payments)
      .where(like(payments.key, 'skew/%'));
    await this.barriers.skewOf(key).wait();
    await tx.insert(payments).values({ key: `skew/${key}`, amount: 1 });
    return { before };
  }
}

/** The Drizzle handlers, on the application's Drizzle database. */
@Module({ controllers: [DrizzleController], providers: [DrizzleBarriers] })
export class DrizzleHandlersModule {}

/**
 * A handler on the pg adapter that builds a Drizzle database of its own on
 * the module's connection (the handler's lazy client), whose
 * `db.transaction()` sends BEGIN and COMMIT on it: the COMMIT ends the
 * handler's transaction underneath the module.
 */
@Controller('drizzle-on-pg')
export class DrizzleOnPgController {
  constructor(
    private readonly idempotency: IdempotencyContext<PgTransaction>,
  ) {}

  @Post()
  @Idempotent()
  async create(@Body() { key }: { key: string }) {
    const db = drizzle({
      client: this.idempotency.transaction as PoolClient,
      schema: paymentsSchema,
    });
    const [{ id }] = await db
      .insert(payments)
      .values({ key, amount: 5 })
      .returning({ id: payments.id });
    await db.transaction(async (tx) => {
      await tx.insert(ledgerEntries).values({ paymentId: id, amount: 5 });
    });
    await db.insert(ledgerEntries).values({ paymentId: id, amount: -5 });
    return { id };
  }
}

/** The handler of {@link DrizzleOnPgController}. */
@Module({ controllers: [DrizzleOnPgController] })
export class DrizzleOnPgModule {}
