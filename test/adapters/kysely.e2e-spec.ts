/**
 * What the Kysely adapter adds to the payments promise (payments.e2e-spec.ts
 * runs that one on Kysely too): the handler's `Transaction` holds nothing
 * until its first statement, keeps the application's plugins and logging,
 * `newTransaction` commits on its own, nested transactions are Kysely's
 * (refused; savepoints in SQL), streaming is refused before it sends
 * anything, a Kysely on another pool than the adapter's is caught before
 * a statement runs outside the transaction, and the options every adapter
 * takes (presence, isolation level) apply.
 */
import { randomUUID } from 'node:crypto';
import { CamelCasePlugin, sql } from 'kysely';
import { IdempotencyContext, IdempotencyService } from '../../src/index.js';
import { KyselyIdempotencyAdapter } from '../../src/kysely/index.js';
import {
  idleInTransaction,
  presenceSessions,
  untilIdleInTransaction,
} from '../utils/sessions.js';
import {
  gates,
  logged,
  post,
  rowsOf,
  startKyselyApp,
  thrown,
  type KyselyApp,
  type Trx,
} from './kysely-app.js';
import { KYSELY, KYSELY_POOL } from './kysely.fixture.js';

describe('the Kysely adapter', () => {
  let target: KyselyApp;

  beforeAll(async () => {
    target = await startKyselyApp({
      plugins: [new CamelCasePlugin()],
      log: (event) => {
        logged.push(event);
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
    expect(await rowsOf(target, key)).toEqual({
      record: 'completed',
      payments: [1],
    });
  });

  it("applies the application's plugins and logging in the handler's transaction", async () => {
    const key = randomUUID();
    logged.length = 0;
    const response = await post(target, 'ledger', { key });
    const body = (await response.json()) as unknown;
    expect({ status: response.status, body }).toEqual({
      status: 201,
      // CamelCasePlugin wrote payment_id and read it back as paymentId.
      body: {
        id: expect.any(Number),
        paymentId: expect.any(Number),
        account: null,
        amount: 20,
      },
    });
    expect(
      logged.map((event) => ({ level: event.level, sql: event.query.sql })),
    ).toEqual([
      {
        level: 'query',
        sql: 'insert into "payments" ("key", "amount") values ($1, $2) returning "id"',
      },
      {
        level: 'query',
        sql: 'insert into "ledger_entries" ("payment_id", "amount") values ($1, $2) returning *',
      },
    ]);
    expect(await rowsOf(target, key)).toEqual({
      record: 'completed',
      payments: [20],
    });
  });

  it("commits newTransaction's writes on their own, at its isolation level, when the handler fails", async () => {
    const key = randomUUID();
    const response = await post(target, 'audited', { key });
    expect(response.status).toBe(500);
    expect({
      handler: await rowsOf(target, key),
      audit: (await rowsOf(target, `audit:${key}:serializable`)).payments,
    }).toEqual({ handler: { record: null, payments: [] }, audit: [0] });
  });

  it.each(['transaction', 'startTransaction'] as const)(
    'refuses %s() in the handler (Kysely refuses it in any transaction): nothing stored, the key free',
    async (how) => {
      const key = randomUUID();
      thrown.length = 0;
      const first = await post(target, 'nested', { key, how });
      expect(first.status).toBe(500);
      expect(thrown).toEqual([
        `calling the ${how === 'transaction' ? '' : 'controlled '}transaction method for a Transaction is not supported`,
      ]);
      expect(await rowsOf(target, key)).toEqual({
        record: null,
        payments: [],
      });
      // The key was released: the retry runs (and fails alike), not 409.
      const retry = await post(target, 'nested', { key, how });
      expect(retry.status).toBe(500);
    },
  );

  it("runs a savepoint of the handler's transaction in SQL: what it rolled back is gone, the rest commits", async () => {
    const key = randomUUID();
    const response = await post(target, 'nested', { key, how: 'savepoint' });
    expect(response.status).toBe(201);
    const { id } = (await response.json()) as { id: number };
    expect(await rowsOf(target, key)).toEqual({
      record: 'completed',
      payments: [40],
    });
    expect(
      await target.db.query(
        'SELECT id FROM ledger_entries WHERE payment_id = $1',
        [id],
      ),
    ).toEqual([]);
  });

  it('refuses stream() before it sends anything: the handler carries on in its transaction', async () => {
    const key = randomUUID();
    const response = await post(target, 'streamed', { key });
    expect({
      status: response.status,
      body: (await response.json()) as unknown,
    }).toEqual({
      status: 201,
      body: {
        id: expect.any(Number),
        refused:
          'Streaming (`stream()`) is not supported in the transaction of an @Idempotent() handler: use `execute()`, or a keyset-paginated loop.',
      },
    });
    expect(await rowsOf(target, key)).toEqual({
      record: 'completed',
      payments: [50],
    });
  });
});

describe('the Kysely adapter given another pool than its Kysely', () => {
  let target: KyselyApp;

  beforeAll(async () => {
    target = await startKyselyApp({}, { otherPool: true });
  });
  afterAll(() => target?.close());

  it("fails the handler's first statement before it runs outside of the transaction", async () => {
    const key = randomUUID();
    thrown.length = 0;
    const response = await post(target, 'ledger', { key });
    expect(response.status).toBe(500);
    expect(thrown).toEqual([
      expect.stringMatching(
        /^The Kysely instance under Symbol\(KYSELY\) does not write through the pg Pool under Symbol\(OTHER_POOL\)/,
      ),
    ]);
    expect(await rowsOf(target, key)).toEqual({
      record: null,
      payments: [],
    });
  });
});

describe("the Kysely adapter's options", () => {
  let target: KyselyApp;

  beforeAll(async () => {
    target = await startKyselyApp(
      {},
      { options: { presence: false, isolationLevel: 'SERIALIZABLE' } },
    );
  });
  afterAll(() => target?.close());

  /** The isolation level of the transaction of `trx`. */
  async function levelOf(trx: Trx): Promise<string> {
    const { rows } = await sql<{
      level: string;
    }>`SELECT current_setting('transaction_isolation') AS level`.execute(trx);
    return rows[0].level;
  }

  it("set the presence and the level of the handlers' transactions and of newTransaction", async () => {
    const context = target.app.get(IdempotencyContext);
    const levels = await target.app
      .get(IdempotencyService)
      .run({ key: randomUUID() }, async (trx: Trx) => ({
        handler: await levelOf(trx),
        newTransaction: await context.newTransaction((manager: Trx) =>
          levelOf(manager),
        ),
      }));
    expect({
      levels,
      presence: await presenceSessions(target.db),
    }).toEqual({
      levels: { handler: 'serializable', newTransaction: 'serializable' },
      presence: [],
    });
  });

  it('are refused when the adapter is made, naming it', () => {
    expect(
      () =>
        new KyselyIdempotencyAdapter({
          kyselyToken: KYSELY,
          poolToken: KYSELY_POOL,
          isolationLevel: 'SNAPSHOT' as 'SERIALIZABLE',
        }),
    ).toThrow(
      'Invalid "isolationLevel" of KyselyIdempotencyAdapter: "SNAPSHOT".',
    );
  });
});
