/**
 * The end of a handler's transaction on the pool adapters (pg, Drizzle,
 * Kysely, Prisma: their statements go through `PoolTransaction`'s client)
 * and on TypeORM,
 * against a real PostgreSQL: a statement the handler sends as the module
 * ends its transaction (a branch still writing beside one that failed, work
 * it did not await) is refused, never run after the ROLLBACK or the COMMIT
 * on the same connection, outside of any transaction.
 */
import type pg from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import {
  handlerContexts,
  type HandlerContext,
} from '../../src/core/handler-context.js';
import { TransactionGate } from '../../src/pg/transaction-gate.js';
import { PoolTransaction } from '../../src/pg/pool-transaction.js';
import { LazyTransaction } from '../../src/typeorm/lazy-transaction.js';
import { lazyQueryRunners } from '../../src/typeorm/lazy-query-runner.js';
import { Barrier } from '../utils/barrier.js';
import { pooledOutsideTransactions } from '../utils/sessions.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import { testPool } from '../utils/test-pool.js';

describe('the end of a handler transaction on a pg pool', () => {
  let db: TestDatabase;
  let pool: pg.Pool;

  beforeAll(async () => {
    db = await createTestDatabase();
    await db.query('CREATE TABLE writes (name text NOT NULL)');
    pool = testPool(db.url);
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  const begin = () =>
    new PoolTransaction(
      pool,
      new TransactionGate(Infinity),
      Date.now() + 30_000,
      undefined,
      (client) => client,
    );
  const write = (transaction: PoolTransaction<unknown>, name: string) =>
    transaction.lazyClient.query('INSERT INTO writes (name) VALUES ($1)', [
      name,
    ]);
  const written = async (prefix: string) =>
    (
      await db.query<{ name: string }>(
        'SELECT name FROM writes WHERE name LIKE $1 ORDER BY name',
        [`${prefix}%`],
      )
    ).map((row) => row.name);

  it.each([
    ['rolls back', 'rollback', []],
    ['commits', 'commit', ['commit:in']],
  ] as const)(
    'refuses a statement sent as it %s, and every one after',
    async (_what, end, kept) => {
      const transaction = begin();
      await write(transaction, `${end}:in`);
      // Sent in the same turn as the end: the module's ROLLBACK or COMMIT
      // is on its way, and the statement must not follow it.
      const ending =
        end === 'commit' ? transaction.commit() : transaction.rollback();
      const during = write(transaction, `${end}:during`);
      await ending;
      const after = write(transaction, `${end}:after`);
      await expect(during).rejects.toThrow(/already committed or rolled back/);
      await expect(after).rejects.toMatchObject({
        name: 'TransactionClosedError',
      });
      expect(await written(end)).toEqual(kept);
    },
  );

  it('fails the commit that the server answered with a ROLLBACK (a statement of the transaction failed): nothing committed, and not told as committed', async () => {
    const transaction = begin();
    const outcomes: unknown[] = [];
    transaction.onEnd((outcome) => outcomes.push(outcome));
    await write(transaction, 'aborted:in');
    // Failed by the server: the transaction is aborted.
    await expect(
      transaction.lazyClient.query('SELECT 1 / 0'),
    ).rejects.toMatchObject({ code: '22012' });
    await expect(transaction.commit()).rejects.toMatchObject({
      name: 'TransactionRolledBackError',
      code: '25P02',
    });
    expect(outcomes).toEqual([]);
    expect(await written('aborted')).toEqual([]);
  });
});

/**
 * The same on TypeORM's transaction of a handler, driven as the module
 * drives it: the handler's statements in its context, the commit out of it.
 */
describe('the end of a handler transaction on TypeORM', () => {
  let db: TestDatabase;
  let dataSource: DataSource;

  beforeAll(async () => {
    db = await createTestDatabase();
    await db.query('CREATE TABLE writes (name text PRIMARY KEY)');
    dataSource = new DataSource({ type: 'postgres', url: db.url, poolSize: 2 });
    await dataSource.initialize();
  });
  afterAll(async () => {
    await dataSource?.destroy();
    await db?.drop();
  });
  afterEach(() => {
    dataSource.subscribers.splice(0);
  });

  const begin = () => {
    const transaction = new LazyTransaction(
      dataSource,
      lazyQueryRunners(dataSource),
      new TransactionGate(Infinity),
      Date.now() + 30_000,
    );
    const outcomes: unknown[] = [];
    transaction.onEnd((outcome) => outcomes.push(outcome));
    /** Runs `fn` as the handler's code runs. */
    const inHandler = <T>(fn: () => T): T =>
      handlerContexts.run({ transaction } as unknown as HandlerContext, fn);
    return { transaction, outcomes, inHandler };
  };
  const written = async (prefix: string) =>
    (
      await db.query<{ name: string }>(
        'SELECT name FROM writes WHERE name LIKE $1 ORDER BY name',
        [`${prefix}%`],
      )
    ).map((row) => row.name);
  const insert = (manager: EntityManager, name: string) =>
    manager.query('INSERT INTO writes (name) VALUES ($1)', [name]);

  it("refuses the handler's transaction of its own begun while the module commits (a subscriber before the COMMIT waits): the COMMIT is sent, and no connection goes back to the pool inside a transaction", async () => {
    const held = new Barrier();
    dataSource.subscribers.push({
      beforeTransactionCommit: () => held.wait(),
    });
    const { transaction, outcomes, inHandler } = begin();
    await inHandler(() => insert(transaction.manager, 'savepoint:in'));
    const committing = transaction.commit();
    await held.reached(1);
    const nested = inHandler(() =>
      transaction.manager.transaction((manager) =>
        insert(manager, 'savepoint:nested'),
      ),
    ).then(
      () => 'committed',
      (error: Error) => error.name,
    );
    expect(await nested).toBe('TransactionClosedError');
    held.open();
    await committing;
    // The hooks run after the current I/O.
    await new Promise(setImmediate);
    expect(outcomes).toEqual([{ committed: true }]);
    expect(await written('savepoint')).toEqual(['savepoint:in']);
    // Every pooled connection is outside of any transaction.
    expect(
      await pooledOutsideTransactions((sql) => dataSource.query(sql), 2),
    ).toEqual([true, true]);
  });

  it('fails the commit that the server answered with a ROLLBACK (a statement of the transaction failed): nothing committed, and not told as committed', async () => {
    const { transaction, outcomes, inHandler } = begin();
    await inHandler(() => insert(transaction.manager, 'aborted:in'));
    await expect(
      inHandler(() => insert(transaction.manager, 'aborted:in')),
    ).rejects.toThrow(/duplicate key/);
    await expect(transaction.commit()).rejects.toMatchObject({
      name: 'TransactionRolledBackError',
    });
    expect(outcomes).toEqual([]);
    expect(await written('aborted')).toEqual([]);
  });
});
