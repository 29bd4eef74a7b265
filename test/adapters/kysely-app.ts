/**
 * The application of kysely.e2e-spec.ts: handlers that park before and
 * after their first statement, write through the CamelCasePlugin, open a
 * transaction of their own, nest, and stream, on a Kysely application of
 * its own database.
 */

import {
  Body,
  Controller,
  InternalServerErrorException,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  sql,
  type Generated,
  type Kysely,
  type KyselyConfig,
  type LogEvent,
} from 'kysely';
import pg from 'pg';
import { testPool } from '../utils/test-pool.js';
import {
  IdempotencyContext,
  IdempotencyModule,
  Idempotent,
} from '../../src/index.js';
import {
  KyselyIdempotencyAdapter,
  type KyselyTransaction,
} from '../../src/kysely/index.js';
import type { PostgresAdapterOptions } from '../../src/stores/index.js';
import { Barrier } from '../utils/barrier.js';
import { listenOn } from '../utils/test-app.js';
import type { TestDatabase } from '../utils/test-database.js';
import { createAdapterDatabase } from './adapter-app.js';
import { KYSELY, KYSELY_POOL, kyselyModule } from './kysely.fixture.js';

/** The payments tables, as the CamelCasePlugin names them. */
export interface CamelDatabase {
  payments: { id: Generated<number>; key: string; amount: number };
  ledgerEntries: {
    id: Generated<number>;
    paymentId: number;
    amount: number;
  };
}

/** The handler's transaction on it. */
export type Trx = KyselyTransaction<CamelDatabase>;

/** Where the parked handler waits: before its first statement, and after. */
export const gates = { beforeFirst: new Barrier(), afterFirst: new Barrier() };
/** What the application's Kysely logged. */
export const logged: LogEvent[] = [];
/** What the handlers threw. */
export const thrown: string[] = [];

/** Runs `fn`, the body of a handler, noting what it throws. */
async function noting<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    thrown.push((error as Error).message);
    throw error;
  }
}

/** How the nested handler tries to nest. */
export type Nesting = 'transaction' | 'startTransaction' | 'savepoint';

@Controller('kysely')
class KyselyController {
  constructor(private readonly idempotency: IdempotencyContext<Trx>) {}

  private pay(trx: Trx, key: string, amount: number) {
    return trx
      .insertInto('payments')
      .values({ key, amount })
      .returning('id')
      .executeTakeFirstOrThrow();
  }

  @Post('parked')
  @Idempotent()
  async parked(@Body() { key }: { key: string }) {
    await gates.beforeFirst.wait();
    const { id } = await this.pay(this.idempotency.transaction, key, 1);
    await gates.afterFirst.wait();
    return { id };
  }

  @Post('ledger')
  @Idempotent()
  ledger(@Body() { key }: { key: string }) {
    return noting(async () => {
      const trx = this.idempotency.transaction;
      const { id } = await this.pay(trx, key, 20);
      return trx
        .insertInto('ledgerEntries')
        .values({ paymentId: id, amount: 20 })
        .returningAll()
        .executeTakeFirstOrThrow();
    });
  }

  @Post('audited')
  @Idempotent()
  async audited(@Body() { key }: { key: string }) {
    await this.idempotency.newTransaction('SERIALIZABLE', async (trx: Trx) => {
      const { rows } = await sql<{
        level: string;
      }>`SELECT current_setting('transaction_isolation') AS level`.execute(trx);
      await this.pay(trx, `audit:${key}:${rows[0].level}`, 0);
    });
    await this.pay(this.idempotency.transaction, key, 30);
    throw new InternalServerErrorException('the handler failed');
  }

  @Post('nested')
  @Idempotent()
  nested(@Body() { key, how }: { key: string; how: Nesting }) {
    return noting(async () => {
      const trx = this.idempotency.transaction;
      const { id } = await this.pay(trx, key, 40);
      if (how === 'savepoint') {
        await sql`SAVEPOINT inner_write`.execute(trx);
        await trx
          .insertInto('ledgerEntries')
          .values({ paymentId: id, amount: 40 })
          .execute();
        await sql`ROLLBACK TO SAVEPOINT inner_write`.execute(trx);
      } else {
        // Kysely types both as `never` on a Transaction: seen as a Kysely.
        const db: Kysely<CamelDatabase> = trx;
        await (how === 'transaction'
          ? db.transaction().execute(() => Promise.resolve())
          : db.startTransaction().execute());
      }
      return { id };
    });
  }

  @Post('streamed')
  @Idempotent()
  async streamed(@Body() { key }: { key: string }) {
    const trx = this.idempotency.transaction;
    let refused = '';
    try {
      for await (const row of trx.selectFrom('payments').selectAll().stream()) {
        refused = `streamed ${row.id}`;
      }
    } catch (error) {
      refused = (error as Error).message;
    }
    const { id } = await this.pay(trx, key, 50);
    return { id, refused };
  }
}

/** A Kysely application on a database of its own. */
export interface KyselyApp {
  readonly app: INestApplication;
  readonly url: string;
  readonly db: TestDatabase;
  readonly pool: pg.Pool;
  close(): Promise<void>;
}

/**
 * Boots the controller above on a Kysely with `config`, whose pool the
 * adapter is told (unless `otherPool`: then the pool of another provider),
 * with the adapter's `options`.
 */
export async function startKyselyApp(
  config: Omit<KyselyConfig, 'dialect'>,
  {
    otherPool = false,
    options = {},
  }: { otherPool?: boolean; options?: PostgresAdapterOptions } = {},
): Promise<KyselyApp> {
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
  try {
    const moduleRef = await Test.createTestingModule({
      imports: [
        kyselyModule(db.url, config),
        OtherPoolModule,
        IdempotencyModule.forRoot({
          gc: false,
          adapter: new KyselyIdempotencyAdapter({
            kyselyToken: KYSELY,
            poolToken: otherPool ? OTHER_POOL : KYSELY_POOL,
            ...options,
          }),
        }),
      ],
      controllers: [KyselyController],
    }).compile();
    const app = await listenOn(moduleRef, 'express');
    return {
      app,
      url: await app.getUrl(),
      db,
      pool: app.get<pg.Pool>(KYSELY_POOL),
      async close() {
        await app.close();
        await app.get<pg.Pool>(OTHER_POOL).end();
        await db.drop();
      },
    };
  } catch (error) {
    await db.drop();
    throw error;
  }
}

/** Sends `body` to the handler at `path`, under its key. */
export function post(
  target: KyselyApp,
  path: string,
  body: { key: string; how?: Nesting },
) {
  return fetch(`${target.url}/kysely/${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': body.key,
    },
    body: JSON.stringify(body),
  });
}

/** The rows of `key`: its record's status, and its payments' amounts. */
export async function rowsOf(target: KyselyApp, key: string) {
  const [row] = await target.db.query<{
    record: string | null;
    payments: number[];
  }>(
    `SELECT (SELECT status FROM idempotency_records WHERE key = $1) AS record,
            ARRAY(SELECT amount FROM payments WHERE key = $1 ORDER BY id) AS payments`,
    [key],
  );
  return row;
}
