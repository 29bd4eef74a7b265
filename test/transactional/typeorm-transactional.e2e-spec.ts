import { DataSource } from 'typeorm';
import {
  addTransactionalDataSource,
  deleteDataSourceByName,
  initializeTransactionalContext,
  StorageDriver,
} from 'typeorm-transactional';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  LedgerService,
  TypeormTransactionalTestModule,
  type CommittedSight,
} from './typeorm-transactional.module.js';

// As typeorm-transactional asks, before the application starts. It patches
// TypeORM's classes, which are this test file's own (Jest loads modules
// anew for each file).
initializeTransactionalContext({ storageDriver: StorageDriver.AUTO });

describe.each(PLATFORMS)('typeorm-transactional (%s)', (platform) => {
  let target: TestApp;
  let ledger: LedgerService;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [TypeormTransactionalTestModule],
      platform,
      dataSourceFactory: async (options) =>
        addTransactionalDataSource(new DataSource(options!)),
    });
    ledger = target.app.get(LedgerService);
    ledger.look = async (reference) => ({
      orders: await sources(reference),
      record: (
        await target.db.query<{ status: string }>(
          `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [reference],
        )
      )[0]?.status,
    });
  });
  afterAll(async () => {
    await target.close();
    deleteDataSourceByName('default');
  });
  beforeEach(async () => {
    ledger.log = [];
    await target.db.query(`TRUNCATE orders, ${IDEMPOTENCY_TABLE_NAME}`);
  });

  const sources = async (reference: string) =>
    (
      await target.db.query<{ source: string }>(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      )
    ).map((row) => row.source);
  /** Resolves once the hooks of `reference` have run. */
  const hooksOf = (reference: string) =>
    new Promise<CommittedSight | undefined>((resolve) => {
      ledger.completed = (done, sight) => {
        if (done === reference) {
          resolve(sight);
        }
      };
    });

  it("joins @Transactional() and MANDATORY to the handler's transaction, gives REQUIRES_NEW its own, and runs the commit hooks after the real commit", async () => {
    const hooks = hooksOf('l1');
    const response = await send(target, '/ledger', {
      key: 'l1',
      body: { reference: 'l1' },
    });
    expect(response.status).toBe(201);
    const txids = (await response.json()) as Record<string, string>;
    // One transaction for the handler, @Transactional() and MANDATORY...
    expect(txids.required).toBe(txids.handler);
    expect(txids.mandatory).toBe(txids.handler);
    // ...the one that completed the record; REQUIRES_NEW had its own.
    const [{ xid }] = await target.db.query<{ xid: string }>(
      `SELECT xmin::text AS xid FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'l1'`,
    );
    expect(BigInt(xid)).toBe(BigInt(txids.handler) % 2n ** 32n);
    expect(txids.audit).not.toBe(txids.handler);
    // The commit hook saw, from another connection, the rows and the record.
    expect(await hooks).toEqual({
      orders: ['required', 'mandatory', 'audit', 'api'],
      record: 'completed',
    });
    expect(ledger.log).toEqual([
      'l1: audit commit',
      'l1: handler returns',
      'l1: commit hook',
      'l1: complete hook',
    ]);
  });

  it('rolls everything back but REQUIRES_NEW when the handler throws after @Transactional() returned, and runs the rollback hooks instead', async () => {
    const hooks = hooksOf('l2');
    const response = await send(target, '/ledger', {
      key: 'l2',
      body: { reference: 'l2', fail: true },
    });
    expect(response.status).toBe(400);
    expect(await hooks).toBeUndefined();
    expect(await sources('l2')).toEqual(['audit']);
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'l2'`,
      ),
    ).toEqual([]);
    expect(ledger.log).toEqual([
      'l2: audit commit',
      'l2: handler returns',
      'l2: rollback hook (declined after the ledger)',
      'l2: complete hook',
    ]);

    // The retry runs again, and commits. Its commit hook reads from the
    // test's connection after the response: awaited, so that it never
    // outlives the suite's database.
    const retryHooks = hooksOf('l2');
    const retried = await send(target, '/ledger', {
      key: 'l2',
      body: { reference: 'l2' },
    });
    expect(retried.status).toBe(201);
    const committed = ['audit', 'required', 'mandatory', 'audit', 'api'];
    expect(await retryHooks).toEqual({
      orders: committed,
      record: 'completed',
    });
    expect(await sources('l2')).toEqual(committed);
  });
});
