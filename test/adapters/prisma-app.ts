/**
 * The Prisma adapter's test application (prisma.e2e-spec.ts): a controller
 * whose handlers wait where the tests look, fail as they ask, nest and
 * open transactions of their own, on a PrismaClient of the test's making.
 */
import {
  Body,
  Controller,
  Inject,
  InternalServerErrorException,
  Module,
  Post,
  ServiceUnavailableException,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { testPool } from '../utils/test-pool.js';
import type { PrismaClient } from './prisma/generated/client.js';
import {
  IdempotencyContext,
  IdempotencyModule,
  Idempotent,
} from '../../src/index.js';
import { PrismaIdempotencyAdapter } from '../../src/prisma/index.js';
import { Barrier } from '../utils/barrier.js';
import { idleInTransaction } from '../utils/sessions.js';
import { listenOn } from '../utils/test-app.js';
import type { TestDatabase } from '../utils/test-database.js';
import { createAdapterDatabase } from './adapter-app.js';
import {
  PRISMA,
  PRISMA_POOL,
  prismaModule,
  type PaymentsTransaction,
  type PrismaModuleOptions,
} from './prisma.fixture.js';

/** Prisma's own timeout of the application's interactive transactions (ms). */
export const PRISMA_TIMEOUT_MS = 300;

/** Where the handlers wait, for the test to see them there. */
export const gates = {
  beforeFirst: new Barrier(),
  afterFirst: new Barrier(),
  hung: new Barrier(),
  outlived: new Barrier(),
  refused: new Barrier(),
};
/** What the handlers saw fail. */
export const seen: { lateWrite?: unknown; nested?: unknown; batch?: unknown } =
  {};

/**
 * How the batching handler writes its payment in a batch `$transaction([...])`
 * on the handler's handle.
 */
export type Batching =
  /** A model query and a raw one of the handle. */
  | 'batch'
  /** The same, at the handler's isolation level, said. */
  | 'same-level'
  /** A raw statement that inserts the payment, and a raw query. */
  | 'raw'
  /** The PrismaClient's own model query, and the handle's raw one. */
  | 'client'
  /** A batch on the handle of a nested `$transaction(fn)`. */
  | 'inner';

/** How many times the batching handler ran, by key. */
const batchAttempts = new Map<string, number>();

/** How the nesting handler nests. */
export type Nesting =
  | 'savepoint'
  | 'failed-savepoint'
  | 'client'
  /**
   * The PrismaClient's own batch `$transaction([...])`, given a query of the
   * handle, then the handler fails.
   */
  | 'client-batch'
  /** A nested `$transaction()` at the handler's level, said. */
  | 'same-level'
  /** A nested `$transaction()` at another level than the handler's. */
  | 'other-level';

@Controller('prisma')
class PrismaController {
  constructor(
    private readonly idempotency: IdempotencyContext<PaymentsTransaction>,
    @Inject(PRISMA) private readonly prisma: PrismaClient,
  ) {}

  private pay(tx: PaymentsTransaction, key: string, amount: number) {
    return tx.payment.create({ data: { key, amount } });
  }

  @Post('parked')
  @Idempotent()
  async parked(@Body() { key }: { key: string }) {
    await gates.beforeFirst.wait();
    const { id } = await this.pay(this.idempotency.transaction, key, 1);
    await gates.afterFirst.wait();
    return { id };
  }

  @Post('hung')
  @Idempotent({ transactionTimeout: '1s' })
  async hung(@Body() { key }: { key: string }) {
    const tx = this.idempotency.transaction;
    const { id } = await this.pay(tx, key, 2);
    await gates.hung.wait();
    try {
      await tx.ledgerEntry.create({ data: { paymentId: id, amount: 2 } });
    } catch (error) {
      seen.lateWrite = error;
    }
    return { id };
  }

  @Post('outlived')
  @Idempotent()
  async outlived(@Body() { key }: { key: string }) {
    const tx = this.idempotency.transaction;
    const { id } = await this.pay(tx, key, 3);
    await gates.outlived.wait();
    await tx.ledgerEntry.create({ data: { paymentId: id, amount: 3 } });
    return { id };
  }

  @Post('conflicting')
  @Idempotent()
  async conflicting(@Body() { key }: { key: string }) {
    await this.pay(this.idempotency.transaction, key, 6);
    // What PostgreSQL answers a transaction that lost to a concurrent one.
    await this.idempotency.transaction.$executeRawUnsafe(
      `DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = 'serialization_failure'; END $$`,
    );
    return { key };
  }

  @Post('refused')
  @Idempotent()
  async refused(@Body() { key }: { key: string }) {
    await gates.refused.wait();
    await this.pay(this.idempotency.transaction, key, 7);
    return { key };
  }

  @Post('level')
  @Idempotent()
  async level() {
    return { level: await this.levelOf(this.idempotency.transaction) };
  }

  @Post('serializable')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  async serializable() {
    return { level: await this.levelOf(this.idempotency.transaction) };
  }

  @Post('nested')
  @Idempotent()
  async nested(@Body() { key, how }: { key: string; how: Nesting }) {
    const tx = this.idempotency.transaction;
    const { id } = await this.pay(tx, key, 4);
    if (how === 'client') {
      // The PrismaClient's own transaction, on another connection.
      await this.prisma.$transaction((other) =>
        this.pay(other, `outside:${key}`, 4),
      );
      throw new InternalServerErrorException('the handler failed');
    }
    if (how === 'client-batch') {
      try {
        await this.prisma.$transaction([
          tx.payment.create({ data: { key, amount: 5 } }),
        ]);
      } catch (error) {
        seen.nested = error;
      }
      throw new InternalServerErrorException('the handler failed');
    }
    try {
      await tx.$transaction(
        async (inner) => {
          await inner.ledgerEntry.create({
            data: { paymentId: id, amount: 4 },
          });
          if (how === 'failed-savepoint') {
            throw new Error('the nested transaction failed');
          }
        },
        how === 'same-level'
          ? { isolationLevel: 'RepeatableRead' }
          : how === 'other-level'
            ? { isolationLevel: 'Serializable' }
            : undefined,
      );
    } catch (error) {
      seen.nested = error;
    }
    return { id };
  }

  /**
   * Writes its payment (9) in a batch `$transaction([...])` beside a query of
   * the connection's pid, then fails with 503 on its first two attempts as a
   * gateway called after the write would; answers whether the batch ran on
   * the handler's connection.
   */
  @Post('batch')
  @Idempotent()
  async batch(@Body() { key, how }: { key: string; how: Batching }) {
    const tx = this.idempotency.transaction;
    const own = await this.pidOf(tx);
    const batch = (handle: PaymentsTransaction) =>
      handle.$transaction(
        [
          how === 'raw'
            ? handle.$executeRawUnsafe(
                'INSERT INTO payments (key, amount) VALUES ($1, 9)',
                key,
              )
            : (how === 'client' ? this.prisma : handle).payment.create({
                data: { key, amount: 9 },
              }),
          handle.$queryRaw<
            Array<{ pid: number }>
          >`SELECT pg_backend_pid() AS pid`,
        ],
        how === 'same-level' ? { isolationLevel: 'RepeatableRead' } : undefined,
      );
    const [written, [{ pid }]] =
      how === 'inner' ? await tx.$transaction(batch) : await batch(tx);
    const attempt = (batchAttempts.get(key) ?? 0) + 1;
    batchAttempts.set(key, attempt);
    if (attempt < 3) {
      throw new ServiceUnavailableException('the gateway is down');
    }
    return {
      written: typeof written === 'number' ? written : written.amount,
      sameConnection: pid === own,
    };
  }

  /**
   * Writes its payment (10), then a batch of a ledger entry (10) and a
   * statement that fails, and goes on with a ledger entry (11); with
   * `ordered`, a batch of two ledger entries and a count of them instead,
   * whose results it answers in order.
   */
  @Post('failed-batch')
  @Idempotent()
  async failedBatch(@Body() { key, how }: { key: string; how?: 'ordered' }) {
    const tx = this.idempotency.transaction;
    const { id } = await this.pay(tx, key, 10);
    if (how === 'ordered') {
      const [first, second, [{ count }]] = await tx.$transaction([
        tx.ledgerEntry.create({ data: { paymentId: id, amount: 1 } }),
        tx.ledgerEntry.create({ data: { paymentId: id, amount: 2 } }),
        tx.$queryRaw<
          Array<{ count: number }>
        >`SELECT count(*)::int AS count FROM ledger_entries WHERE payment_id = ${id}`,
      ]);
      return { results: [first.amount, second.amount, count] };
    }
    try {
      await tx.$transaction([
        tx.ledgerEntry.create({ data: { paymentId: id, amount: 10 } }),
        tx.$executeRawUnsafe(
          `DO $$ BEGIN RAISE EXCEPTION 'the batch failed'; END $$`,
        ),
      ]);
    } catch (error) {
      seen.batch = error;
    }
    // The handler's transaction goes on after the batch's failure.
    await tx.ledgerEntry.create({ data: { paymentId: id, amount: 11 } });
    return { id };
  }

  @Post('audited')
  @Idempotent()
  async audited(@Body() { key }: { key: string }) {
    await this.idempotency.newTransaction(
      'SERIALIZABLE',
      async (tx: PaymentsTransaction) => {
        await this.pay(tx, `audit:${key}:${await this.levelOf(tx)}`, 0);
      },
    );
    await this.pay(this.idempotency.transaction, key, 5);
    throw new InternalServerErrorException('the handler failed');
  }

  /** The pid of the session that runs the statements of `tx`. */
  private async pidOf(tx: PaymentsTransaction) {
    const [{ pid }] = await tx.$queryRaw<
      Array<{ pid: number }>
    >`SELECT pg_backend_pid() AS pid`;
    return pid;
  }

  /** The isolation level of the transaction `tx`. */
  private async levelOf(tx: PaymentsTransaction) {
    const [{ level }] = await tx.$queryRaw<
      Array<{ level: string }>
    >`SELECT current_setting('transaction_isolation') AS level`;
    return level;
  }
}

/** A Prisma application on a database of its own. */
export interface PrismaApp {
  readonly app: INestApplication;
  readonly url: string;
  readonly db: TestDatabase;
  readonly pool: pg.Pool;
  readonly prisma: PrismaClient;
  close(): Promise<void>;
}

/**
 * Boots the controller above on a PrismaClient made with `options`; with
 * `otherPool`, the adapter is told the token of another pool than the one
 * PrismaPg writes through.
 */
export async function startPrismaApp(
  options: PrismaModuleOptions & { otherPool?: boolean } = {},
): Promise<PrismaApp> {
  const db = await createAdapterDatabase();
  const OTHER_POOL = Symbol('OTHER_POOL');
  @Module({
    providers: [
      {
        provide: OTHER_POOL,
        useFactory: () => testPool(db.url),
      },
    ],
    exports: [OTHER_POOL],
  })
  class OtherPoolModule {}
  let other: pg.Pool | undefined;
  try {
    const moduleRef = await Test.createTestingModule({
      imports: [
        prismaModule(db.url, options),
        OtherPoolModule,
        IdempotencyModule.forRoot({
          gc: false,
          adapter: new PrismaIdempotencyAdapter({
            prismaToken: PRISMA,
            ...(options.otherPool ? { poolToken: OTHER_POOL } : {}),
          }),
        }),
      ],
      controllers: [PrismaController],
    }).compile();
    other = moduleRef.get<pg.Pool>(OTHER_POOL);
    const app = await listenOn(moduleRef, 'express');
    return {
      app,
      url: await app.getUrl(),
      db,
      pool: app.get<pg.Pool>(PRISMA_POOL),
      prisma: app.get<PrismaClient>(PRISMA),
      async close() {
        await app.close();
        await other?.end();
        await db.drop();
      },
    };
  } catch (error) {
    await other?.end();
    await db.drop();
    throw error;
  }
}

/** Sends `body` to the handler at `path`, under its key. */
export function post(
  target: PrismaApp,
  path: string,
  body: { key: string; how?: Nesting | Batching | 'ordered' },
) {
  return fetch(`${target.url}/prisma/${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': body.key,
    },
    body: JSON.stringify(body),
  });
}

/** The rows of `key`: its record's status, its payments' and ledger's amounts. */
export async function rowsOf(target: PrismaApp, key: string) {
  const [row] = await target.db.query<{
    record: string | null;
    payments: number[];
    ledger: number[];
  }>(
    `SELECT (SELECT status FROM idempotency_records WHERE key = $1) AS record,
            ARRAY(SELECT amount FROM payments WHERE key = $1 ORDER BY id) AS payments,
            ARRAY(SELECT l.amount FROM ledger_entries l
                    JOIN payments p ON p.id = l.payment_id
                  WHERE p.key = $1 ORDER BY l.id) AS ledger`,
    [key],
  );
  return row;
}

/** The rows of a key of which nothing was written. */
export const NOTHING = { record: null, payments: [], ledger: [] };

/** The rows of a completed key, with its payments' and ledger's amounts. */
export const committed = (
  payments: number[],
  ledger: readonly number[] = [],
) => ({
  record: 'completed',
  payments,
  ledger,
});

/** Whether the session `pid` sits idle inside a transaction. */
export async function inTransaction(target: PrismaApp, pid: number) {
  return (await idleInTransaction(target.db)).includes(pid);
}
