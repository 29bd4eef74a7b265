/**
 * The options every adapter of the PostgreSQL store takes, beside its own:
 * `presence` (in place of the module's) and `isolationLevel` (the default
 * of its handlers' transactions), here on node-postgres and TypeORM.
 */
import { randomUUID } from 'node:crypto';
import { IdempotencyService } from '../../src/index.js';
import {
  PgIdempotencyAdapter,
  type PgTransaction,
} from '../../src/pg/index.js';
import { TypeOrmIdempotencyAdapter } from '../../src/typeorm/index.js';
import { presenceSessions } from '../utils/sessions.js';
import { startAdapterApp, type AdapterApp } from './adapter-app.js';
import type { AdapterFixture } from './adapter-fixture.js';
import { PG_POOL, pgFixture } from './pg.fixture.js';
import { typeormFixture } from './typeorm.fixture.js';

/** `fixture` with its adapter made anew with `options`. */
const withOptions = (
  fixture: AdapterFixture,
  adapter: AdapterFixture['setUp'] extends (url: string) => infer R
    ? R extends { adapter?: infer A }
      ? A
      : never
    : never,
): AdapterFixture => ({
  ...fixture,
  setUp: (url) => ({ ...fixture.setUp(url), adapter }),
});

describe.each([
  [
    'pg',
    withOptions(
      pgFixture,
      new PgIdempotencyAdapter({
        poolToken: PG_POOL,
        presence: false,
        isolationLevel: 'SERIALIZABLE',
      }),
    ),
  ],
  [
    'typeorm',
    withOptions(
      typeormFixture,
      new TypeOrmIdempotencyAdapter({
        presence: false,
        isolationLevel: 'SERIALIZABLE',
      }),
    ),
  ],
] as const)('the options of the %s adapter', (name, fixture) => {
  let target: AdapterApp;

  beforeAll(async () => {
    target = await startAdapterApp(fixture);
  });
  afterAll(() => target?.close());

  it('turn the presence session off in place of the module option', async () => {
    expect(await presenceSessions(target.db)).toEqual([]);
  });

  it("set the isolation level of the handlers' transactions", async () => {
    const key = randomUUID();
    const level =
      name === 'pg'
        ? await target.app
            .get(IdempotencyService)
            .run({ key }, async (tx: PgTransaction) => {
              const { rows } = await tx.query<{
                transaction_isolation: string;
              }>('SHOW transaction_isolation');
              return rows[0].transaction_isolation;
            })
        : await target.app
            .get(IdempotencyService)
            .run({ key }, async (manager) => {
              const rows: Array<{ transaction_isolation: string }> =
                await manager.query('SHOW transaction_isolation');
              return rows[0].transaction_isolation;
            });
    expect(level).toBe('serializable');
  });
});

describe('an adapter option of another value', () => {
  it.each([
    [{ presence: 'yes' }, 'Invalid "presence" of PgIdempotencyAdapter: "yes".'],
    [
      { isolationLevel: 'SNAPSHOT' },
      'Invalid "isolationLevel" of PgIdempotencyAdapter: "SNAPSHOT".',
    ],
  ])('is refused when the adapter is made: %j', (options, message) => {
    expect(
      () =>
        new PgIdempotencyAdapter({
          poolToken: PG_POOL,
          ...(options as object),
        }),
    ).toThrow(message);
  });
});

describe('an adapter whose client the application does not provide', () => {
  it('stops the application at start-up, naming the token', async () => {
    const fixture: AdapterFixture = {
      ...pgFixture,
      setUp: (url) => ({
        ...pgFixture.setUp(url),
        adapter: new PgIdempotencyAdapter({ poolToken: 'MISSING_POOL' }),
      }),
    };
    await expect(startAdapterApp(fixture)).rejects.toThrow(
      'IdempotencyModule found no pg Pool under the token MISSING_POOL.',
    );
  });
});
