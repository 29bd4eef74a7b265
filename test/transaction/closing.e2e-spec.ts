/**
 * The end of a handler's transaction on the pool adapters (pg, Drizzle,
 * Kysely, Prisma: their statements go through `PoolTransaction`'s client),
 * against a real PostgreSQL: a statement the handler sends as the module
 * ends its transaction (a branch still writing beside one that failed, work
 * it did not await) is refused, never run after the ROLLBACK or the COMMIT
 * on the same connection, outside of any transaction.
 */
import type pg from 'pg';
import { TransactionGate } from '../../src/pg/transaction-gate.js';
import { PoolTransaction } from '../../src/pg/pool-transaction.js';
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
});
