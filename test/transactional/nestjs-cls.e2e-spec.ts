import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { describeWithRequireEsm } from '../utils/jest-esm.js';
import type { AccountsService, ClsSight } from './nestjs-cls.module.js';

/**
 * nestjs-cls is CommonJS and requires @nestjs/common 12, an ES module (see
 * `describeWithRequireEsm`).
 */
const describeCls = describeWithRequireEsm('@nestjs-cls/transactional');

/**
 * The test module, loaded once @nestjs/common is: Jest refuses a require()
 * of an ES module that is still being loaded itself.
 */
const fixtures = () => import('./nestjs-cls.module.js');

describeCls.each(PLATFORMS)('@nestjs-cls/transactional (%s)', (platform) => {
  let target: TestApp;
  let accounts: AccountsService;

  beforeAll(async () => {
    const { AccountsService, clsModule, NestjsClsTestModule } =
      await fixtures();
    target = await startTestApp({
      imports: [clsModule(), NestjsClsTestModule],
      platform,
    });
    accounts = target.app.get(AccountsService);
    accounts.look = async (reference) => ({
      reference,
      orders: await sources(reference),
      record: (
        await target.db.query<{ status: string }>(
          `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [reference],
        )
      )[0]?.status,
    });
  });
  afterAll(() => target.close());
  beforeEach(async () => {
    accounts.log = [];
    await target.db.query(`TRUNCATE orders, ${IDEMPOTENCY_TABLE_NAME}`);
  });

  const sources = async (reference: string) =>
    (
      await target.db.query<{ source: string }>(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      )
    ).map((row) => row.source);
  const hookOf = (reference: string) =>
    new Promise<ClsSight>((resolve) => {
      accounts.seen = (sight) => {
        if (sight.reference === reference) {
          resolve(sight);
        }
      };
    });

  it("makes the handler's transaction the plugin's: active, joined by @Transactional() and Mandatory, a savepoint for Nested; RequiresNew gets its own", async () => {
    const hook = hookOf('c1');
    const response = await send(target, '/accounts', {
      key: 'c1',
      body: { reference: 'c1', failNested: true },
    });
    expect(response.status).toBe(201);
    const result = (await response.json()) as Record<string, unknown>;
    expect(result.active).toBe(true);
    expect(result.required).toBe(result.handler);
    expect(result.mandatory).toBe(result.handler);
    expect(result.audit).not.toBe(result.handler);
    // The failed Nested rolled back to its savepoint only.
    expect(await hook).toEqual({
      reference: 'c1',
      orders: [
        'required',
        'mandatory',
        'audit',
        'unsupported',
        'unsupported-repository',
        'unsupported-query-builder',
        'api',
      ],
      record: 'completed',
    });
    expect(accounts.log).toEqual(['c1: handler returns', 'c1: after commit']);

    const nested = await send(target, '/accounts', {
      key: 'c2',
      body: { reference: 'c2' },
    });
    expect(nested.status).toBe(201);
    const { handler } = (await nested.json()) as { handler: string };
    // The record was completed by the handler's transaction.
    const [{ xid }] = await target.db.query<{ xid: string }>(
      `SELECT xmin::text AS xid FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'c2'`,
    );
    expect(BigInt(xid)).toBe(BigInt(handler) % 2n ** 32n);
    expect(await sources('c2')).toEqual([
      'required',
      'mandatory',
      'audit',
      'unsupported',
      'unsupported-repository',
      'unsupported-query-builder',
      'nested',
      'api',
    ]);
  });

  it('rolls everything back but RequiresNew and NotSupported when the handler throws after @Transactional() returned; afterCommit never runs', async () => {
    const failed = await send(target, '/accounts', {
      key: 'c3',
      body: { reference: 'c3', fail: true },
    });
    expect(failed.status).toBe(400);
    expect(await sources('c3')).toEqual([
      'audit',
      'unsupported',
      'unsupported-repository',
      'unsupported-query-builder',
    ]);
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'c3'`,
      ),
    ).toEqual([]);
    // Hooks run in the order of the commits: once the next one has run,
    // the failed request's would have.
    const next = hookOf('c4');
    expect(
      (
        await send(target, '/accounts', {
          key: 'c4',
          body: { reference: 'c4' },
        })
      ).status,
    ).toBe(201);
    await next;
    expect(accounts.log).toEqual([
      'c3: handler returns',
      'c4: handler returns',
      'c4: after commit',
    ]);
  });

  it('leaves the plugin as it was outside decorated handlers', async () => {
    const response = await send(target, '/plain-accounts', {
      body: { reference: 'c5' },
    });
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ active: true });
    expect(await sources('c5')).toEqual(['plain']);
  });
});

describeCls('@nestjs-cls/transactional misconfigured', () => {
  it("refuses to start when the adapter's connectionName is not the plugin's", async () => {
    const { clsModule, NestjsClsTestModule } = await fixtures();
    await expect(
      startTestApp({ imports: [clsModule('reporting'), NestjsClsTestModule] }),
    ).rejects.toThrow(
      /IdempotencyTransactionalAdapter found no TransactionHost of its own: .*Give the adapter the same `connectionName` as the plugin/s,
    );
  });
});
