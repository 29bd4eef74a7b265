/**
 * What the Prisma adapter adds to the payments promise (payments.e2e-spec.ts
 * runs that one on Prisma too): the handler's interactive transaction holds
 * nothing until its first statement, lives until the module's deadline
 * whatever Prisma's own timeout and not a moment past it, takes the
 * PrismaClient's isolation level unless the route sets one, nests as
 * savepoints, and leaves `newTransaction` and the PrismaClient's own
 * transactions to commit on their own; a PrismaClient whose pool the module
 * cannot reach is refused.
 */
import { randomUUID } from 'node:crypto';
import {
  Body,
  Controller,
  Inject,
  InternalServerErrorException,
  Module,
  Post,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import type { PrismaClient } from './prisma/generated/client.js';
import {
  IdempotencyContext,
  IdempotencyModule,
  IdempotencyService,
  Idempotent,
} from '../../src/index.js';
import { PrismaIdempotencyAdapter } from '../../src/prisma/index.js';
import { Barrier, until } from '../utils/barrier.js';
import {
  idleInTransaction,
  PRESENCE_APPLICATION_NAME,
  sessions,
  terminateBackend,
  untilIdleInTransaction,
} from '../utils/sessions.js';
import { listenOn } from '../utils/test-app.js';
import { onServer, type TestDatabase } from '../utils/test-database.js';
import { createAdapterDatabase } from './adapter-app.js';
import {
  PRISMA,
  PRISMA_POOL,
  prismaModule,
  type PaymentsTransaction,
  type PrismaModuleOptions,
} from './prisma.fixture.js';

/** Prisma's own timeout of the application's interactive transactions (ms). */
const PRISMA_TIMEOUT_MS = 300;

/** Where the handlers wait, for the test to see them there. */
const gates = {
  beforeFirst: new Barrier(),
  afterFirst: new Barrier(),
  hung: new Barrier(),
  outlived: new Barrier(),
  refused: new Barrier(),
};
/** What the handlers saw fail. */
const seen: { lateWrite?: unknown; nested?: unknown } = {};

/** How the nesting handler nests. */
type Nesting = 'savepoint' | 'failed-savepoint' | 'client';

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
    try {
      await tx.$transaction(async (inner) => {
        await inner.ledgerEntry.create({ data: { paymentId: id, amount: 4 } });
        if (how === 'failed-savepoint') {
          throw new Error('the nested transaction failed');
        }
      });
    } catch (error) {
      seen.nested = error;
    }
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

  /** The isolation level of the transaction `tx`. */
  private async levelOf(tx: PaymentsTransaction) {
    const [{ level }] = await tx.$queryRaw<
      Array<{ level: string }>
    >`SELECT current_setting('transaction_isolation') AS level`;
    return level;
  }
}

/** A Prisma application on a database of its own. */
interface PrismaApp {
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
async function startPrismaApp(
  options: PrismaModuleOptions & { otherPool?: boolean } = {},
): Promise<PrismaApp> {
  const db = await createAdapterDatabase();
  const OTHER_POOL = Symbol('OTHER_POOL');
  @Module({
    providers: [
      {
        provide: OTHER_POOL,
        useFactory: () => new pg.Pool({ connectionString: db.url, max: 5 }),
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

function post(
  target: PrismaApp,
  path: string,
  body: { key: string; how?: Nesting },
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
async function rowsOf(target: PrismaApp, key: string) {
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
const NOTHING = { record: null, payments: [], ledger: [] };

/** The rows of a completed key, with its payments' and ledger's amounts. */
const committed = (payments: number[], ledger: readonly number[] = []) => ({
  record: 'completed',
  payments,
  ledger,
});

/** Whether the session `pid` sits idle inside a transaction. */
async function inTransaction(target: PrismaApp, pid: number) {
  return (await idleInTransaction(target.db)).includes(pid);
}

describe('the Prisma adapter', () => {
  let target: PrismaApp;

  beforeAll(async () => {
    target = await startPrismaApp({
      client: {
        transactionOptions: {
          timeout: PRISMA_TIMEOUT_MS,
          isolationLevel: 'RepeatableRead',
        },
      },
    });
  });
  afterAll(() => target?.close());

  it('holds no connection while the handler waits before its first statement, and one transaction after it', async () => {
    const key = randomUUID();
    const answer = post(target, 'parked', { key });
    await gates.beforeFirst.reached();
    expect({
      lent: target.pool.totalCount - target.pool.idleCount,
      waitingForOne: target.pool.waitingCount,
      inTransaction: await idleInTransaction(target.db),
    }).toEqual({ lent: 0, waitingForOne: 0, inTransaction: [] });

    gates.beforeFirst.open();
    await gates.afterFirst.reached();
    // The first statement took a connection and began the transaction:
    // its payment is not visible outside of it yet.
    expect({
      lent: target.pool.totalCount - target.pool.idleCount,
      inTransaction: (await untilIdleInTransaction(target.db, 1)).length,
      payments: (await rowsOf(target, key)).payments,
    }).toEqual({ lent: 1, inTransaction: 1, payments: [] });

    gates.afterFirst.open();
    const response = await answer;
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([1]));
  });

  it("ends the transaction at the module's deadline, before Prisma's own timeout of it: 503, its writes rolled back, its later ones refused", async () => {
    const key = randomUUID();
    const answer = await post(target, 'hung', { key });
    expect(answer.status).toBe(503);
    expect({
      rows: await rowsOf(target, key),
      inTransaction: await idleInTransaction(target.db),
    }).toEqual({
      rows: NOTHING,
      inTransaction: [],
    });

    gates.hung.open();
    await until(
      () => Promise.resolve(seen.lateWrite !== undefined),
      'the late write',
    );
    expect(seen.lateWrite).toBeInstanceOf(Error);
    expect(await rowsOf(target, key)).toEqual(NOTHING);
  });

  it("keeps the transaction open past Prisma's own timeout, until the handler returns within its deadline", async () => {
    const key = randomUUID();
    const answer = post(target, 'outlived', { key });
    await gates.outlived.reached();
    const [handler] = await untilIdleInTransaction(target.db, 1);
    // An interactive transaction of the application, begun at the same
    // time, with Prisma's own timeout.
    const control = new Barrier();
    let controlPid = 0;
    const controlled = target.prisma.$transaction(async (tx) => {
      [{ pid: controlPid }] = await tx.$queryRaw<
        Array<{ pid: number }>
      >`SELECT pg_backend_pid() AS pid`;
      await control.wait();
      await tx.$queryRaw`SELECT 1`;
    });
    await control.reached();
    // Prisma rolls the application's transaction back at its timeout...
    await until(
      async () => !(await inTransaction(target, controlPid)),
      "Prisma's timeout of the control transaction",
    );
    // ... and leaves the handler's open.
    expect(await inTransaction(target, handler)).toBe(true);
    control.open();
    await expect(controlled).rejects.toThrow(/timeout/i);

    gates.outlived.open();
    const response = await answer;
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([3], [3]));
  });

  it("answers 503 when the database fails the handler's statement on a serialization failure, as on any library: nothing stored, the key free", async () => {
    const key = randomUUID();
    const answers = [
      await post(target, 'conflicting', { key }),
      await post(target, 'conflicting', { key }),
    ];
    expect(answers.map((answer) => answer.status)).toEqual([503, 503]);
    expect(await rowsOf(target, key)).toEqual(NOTHING);
  });

  it('answers 503 when the transaction cannot begin (the server refuses new connections): nothing written', async () => {
    const key = randomUUID();
    const database = new URL(target.db.url).pathname.slice(1);
    const answer = post(target, 'refused', { key });
    await gates.refused.reached();
    // The handler, claimed and holding nothing, waits before its first
    // statement while the database stops accepting connections and the
    // pooled ones end (the presence session stays).
    await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
    try {
      for (const session of await sessions(target.db)) {
        if (session.applicationName !== PRESENCE_APPLICATION_NAME) {
          await terminateBackend(target.db, session.pid);
        }
      }
      gates.refused.open();
      expect((await answer).status).toBe(503);
    } finally {
      await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
    }
    expect((await rowsOf(target, key)).payments).toEqual([]);
  });

  it("begins the handler's transaction at the PrismaClient's isolation level, or at the route's", async () => {
    const levels = await Promise.all(
      ['level', 'serializable'].map(async (path) => {
        const response = await post(target, path, { key: randomUUID() });
        return { status: response.status, body: await response.json() };
      }),
    );
    expect(levels).toEqual([
      { status: 201, body: { level: 'repeatable read' } },
      { status: 201, body: { level: 'serializable' } },
    ]);
  });

  it.each([
    ['commits with the handler', 'savepoint', [4]],
    ['rolls back to its savepoint alone', 'failed-savepoint', []],
  ] as const)(
    "runs a nested $transaction as a savepoint of the handler's transaction, which %s",
    async (_what, how, ledger) => {
      const key = randomUUID();
      seen.nested = undefined;
      const response = await post(target, 'nested', { key, how });
      expect(response.status).toBe(201);
      expect(await rowsOf(target, key)).toEqual(committed([4], ledger));
      expect((seen.nested as Error | undefined)?.message).toBe(
        how === 'savepoint' ? undefined : 'the nested transaction failed',
      );
    },
  );

  it("commits the PrismaClient's own transactions on their own, whatever becomes of the handler's", async () => {
    const key = randomUUID();
    const response = await post(target, 'nested', { key, how: 'client' });
    expect(response.status).toBe(500);
    expect({
      handler: await rowsOf(target, key),
      outside: (await rowsOf(target, `outside:${key}`)).payments,
    }).toEqual({
      handler: NOTHING,
      outside: [4],
    });
  });

  it("runs IdempotencyService.run()'s function in the transaction, on Prisma's handle, once", async () => {
    const key = randomUUID();
    const service = target.app.get(IdempotencyService);
    const pay = () =>
      service.run({ key }, async (tx: PaymentsTransaction) => {
        const { id } = await tx.payment.create({ data: { key, amount: 8 } });
        return { id };
      });
    const first = await pay();
    expect(await pay()).toEqual(first);
    expect(await rowsOf(target, key)).toEqual(committed([8]));
  });

  it("commits newTransaction's writes on their own, at its isolation level, when the handler fails", async () => {
    const key = randomUUID();
    const response = await post(target, 'audited', { key });
    expect(response.status).toBe(500);
    expect({
      handler: (await rowsOf(target, key)).payments,
      audit: (await rowsOf(target, `audit:${key}:serializable`)).payments,
    }).toEqual({ handler: [], audit: [0] });
  });
});

describe('the Prisma adapter on a PrismaClient whose pool it cannot reach', () => {
  it('refuses to start when PrismaPg was given settings instead of a pool', async () => {
    await expect(startPrismaApp({ settingsOnly: true })).rejects.toThrow(
      'The idempotency module found no pg Pool under the PrismaClient',
    );
  });

  it("answers 503 before the handler runs when told another pool than PrismaPg's: Prisma's transaction rolled back, nothing stored", async () => {
    const target = await startPrismaApp({ otherPool: true });
    try {
      const key = randomUUID();
      const response = await post(target, 'level', { key });
      expect(response.status).toBe(503);
      expect({
        rows: await rowsOf(target, key),
        inTransaction: await idleInTransaction(target.db),
      }).toEqual({
        rows: NOTHING,
        inTransaction: [],
      });
    } finally {
      await target.close();
    }
  });
});
