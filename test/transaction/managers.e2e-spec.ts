import { EntityManager, QueryBuilder, SelectQueryBuilder } from 'typeorm';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { ManagersService, ManagersTestModule } from './managers.module.js';

/** EntityManager's methods as TypeORM defines them, before any app starts. */
const pristine = Object.getOwnPropertyDescriptors(EntityManager.prototype);
/** How query builders take a runner, as TypeORM defines it. */
const pristineRunners = [
  QueryBuilder.prototype,
  SelectQueryBuilder.prototype,
].map((prototype) =>
  Object.getOwnPropertyDescriptor(prototype, 'obtainQueryRunner'),
);

const WAYS = [
  'customRepository',
  'customRepositoryQueryBuilder',
  'extendedRepository',
  'newEntityManager',
  'newEntityManagerQueryBuilder',
  'newEntityManagerQuery',
  'newEntityManagerTransaction',
  'createdManagerRepository',
  'withRepository',
  'prebuiltQueryBuilder',
  'prebuiltRepositoryQueryBuilder',
] as const;

describe.each(PLATFORMS)(
  "managers the application makes itself, in the handler's transaction (%s)",
  (platform) => {
    let target: TestApp;
    let service: ManagersService;

    beforeAll(async () => {
      target = await startTestApp({ imports: [ManagersTestModule], platform });
      service = target.app.get(ManagersService);
    });
    afterAll(() => target.close());

    const orders = (reference: string) =>
      target.db.query<{ source: string }>(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      );
    const records = (key: string) =>
      target.db.query<{ status: string; response_status: number }>(
        `SELECT status, response_status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      );

    it('knows every way the service writes', () => {
      expect(Object.keys(service.ways)).toEqual([...WAYS]);
    });

    it.each(WAYS)(
      '%s: two attempts that fail with 503 leave no row, the third commits one with its record, the fourth replays it',
      async (via) => {
        const key = `${platform}-${via}`;
        const body = { reference: key, via, failures: 2 };
        const seen: Array<{
          status: number;
          replayed: string | null;
          answer: string;
          orders: number;
          record: string;
        }> = [];
        for (let i = 0; i < 4; i += 1) {
          const response = await send(target, '/managers', { key, body });
          const [record] = await records(key);
          seen.push({
            status: response.status,
            replayed: response.headers.get('idempotent-replayed'),
            answer: await response.text(),
            orders: (await orders(key)).length,
            record: record ? `${record.status} ${record.response_status}` : '',
          });
        }
        const failed = {
          status: 503,
          replayed: null,
          answer: JSON.stringify({
            message: 'gateway down',
            error: 'Service Unavailable',
            statusCode: 503,
          }),
          orders: 0,
          record: '',
        };
        const committed = {
          status: 201,
          replayed: null,
          answer: '{"attempt":3}',
          orders: 1,
          record: 'completed 201',
        };
        expect(seen).toEqual([
          failed,
          failed,
          committed,
          { ...committed, replayed: 'true' },
        ]);
        expect(service.attempts.get(key)).toBe(3);
        expect(await orders(key)).toEqual([
          {
            source: via === 'extendedRepository' ? 'extended' : via,
          },
        ]);
      },
    );

    it('reads through each of them in the transaction that completes the record', async () => {
      const key = `${platform}-txids`;
      const response = await send(target, '/txids', { key, body: {} });
      expect(response.status).toBe(201);
      const txids = (await response.json()) as Record<string, string>;
      expect(Object.keys(txids)).toHaveLength(4);
      expect(new Set(Object.values(txids)).size).toBe(1);
      const [{ xid }] = await target.db.query<{ xid: string }>(
        `SELECT xmin::text AS xid FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [key],
      );
      expect(BigInt(xid)).toBe(BigInt(txids.customRepository) % 2n ** 32n);
    });

    it('leaves a manager made on a query runner of its own to it: its write commits although the handler fails', async () => {
      const key = `${platform}-own-runner`;
      const response = await send(target, '/own-runner', {
        key,
        body: { reference: key, via: 'ownRunner' },
      });
      expect(response.status).toBe(503);
      expect(await orders(key)).toEqual([{ source: 'ownRunner' }]);
      expect(await records(key)).toEqual([]);
    });

    it('writes in autocommit outside of a decorated handler, as before', async () => {
      const reference = `${platform}-plain`;
      const response = await send(target, '/plain', {
        body: { reference, via: 'customRepository', failures: 1 },
      });
      expect(response.status).toBe(503);
      expect(await orders(reference)).toEqual([{ source: 'customRepository' }]);
    });
  },
);

describe("EntityManager's methods", () => {
  const running = new Set<TestApp>();
  const start = async () => {
    const app = await startTestApp({ imports: [ManagersTestModule] });
    running.add(app);
    return app;
  };
  const close = (app: TestApp) => {
    running.delete(app);
    return app.close();
  };
  afterEach(() => Promise.all([...running].map(close)));

  it('redirect while an application runs, and are given back when the last one closes', async () => {
    const current = () =>
      Object.getOwnPropertyDescriptors(EntityManager.prototype);
    const first = await start();
    const second = await start();
    const redirecting = current();
    expect(redirecting.save.value).not.toBe(pristine.save.value);
    expect(redirecting.release.value).toBe(pristine.release.value);
    await close(first);
    expect(current()).toEqual(redirecting);
    // The second application's managers still write in its handlers'
    // transactions.
    const response = await send(second, '/managers', {
      key: 'second',
      body: { reference: 'second', via: 'newEntityManager', failures: 1 },
    });
    expect(response.status).toBe(503);
    expect(
      await second.db.query(`SELECT 1 FROM orders WHERE reference = 'second'`),
    ).toEqual([]);
    await close(second);
    expect(current()).toEqual(pristine);
    expect(
      [QueryBuilder.prototype, SelectQueryBuilder.prototype].map((prototype) =>
        Object.getOwnPropertyDescriptor(prototype, 'obtainQueryRunner'),
      ),
    ).toEqual(pristineRunners);
  });
});
