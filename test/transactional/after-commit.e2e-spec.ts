import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { answer, UNAVAILABLE } from '../utils/problems.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Barrier } from '../utils/barrier.js';
import {
  PlainService,
  PlainTestModule,
  type HookSight,
} from './plain.module.js';

describe.each(PLATFORMS)(
  'afterCommit and newTransaction on plain TypeORM (%s)',
  (platform) => {
    let target: TestApp;
    let service: PlainService;

    beforeAll(async () => {
      target = await startTestApp({ imports: [PlainTestModule], platform });
      service = target.app.get(PlainService);
      // Read from the test's own connection: what is committed, only.
      service.look = async (reference) => {
        const [{ orders }] = await target.db.query<{ orders: number }>(
          'SELECT count(*)::int AS orders FROM orders WHERE reference = $1',
          [reference],
        );
        const [record] = await target.db.query<{ status: string }>(
          `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
          [reference],
        );
        return { reference, orders, record: record?.status };
      };
    });
    afterAll(() => target.close());
    beforeEach(async () => {
      service.log = [];
      await target.db.query(`TRUNCATE orders, ${IDEMPOTENCY_TABLE_NAME}`);
    });

    /** Resolves with what the hook of `reference` saw. */
    const hookOf = (reference: string) =>
      new Promise<HookSight>((resolve) => {
        service.seen = (sight) => {
          if (sight.reference === reference) {
            resolve(sight);
          }
        };
      });
    const sources = async (reference: string) =>
      (
        await target.db.query<{ source: string }>(
          'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
          [reference],
        )
      ).map((row) => row.source);

    it('runs the callbacks after the commit of the writes and the record, in order; one that throws changes nothing', async () => {
      const seen = hookOf('n1');
      const response = await send(target, '/notify', {
        key: 'n1',
        body: { reference: 'n1' },
      });
      expect(response.status).toBe(201);
      expect(await response.json()).toEqual({ reference: 'n1' });
      // Seen from another connection: committed before the hook ran.
      expect(await seen).toEqual({
        reference: 'n1',
        orders: 1,
        record: 'completed',
      });
      expect(service.log).toEqual([
        'n1: handler returns',
        'n1: failing hook',
        'n1: hook',
      ]);

      // A replay runs no handler and no hook.
      const replay = await send(target, '/notify', {
        key: 'n1',
        body: { reference: 'n1' },
      });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      const next = hookOf('n2');
      expect(
        (
          await send(target, '/notify', {
            key: 'n2',
            body: { reference: 'n2' },
          })
        ).status,
      ).toBe(201);
      await next;
      expect(service.log).toEqual([
        'n1: handler returns',
        'n1: failing hook',
        'n1: hook',
        'n2: handler returns',
        'n2: failing hook',
        'n2: hook',
      ]);
    });

    it('never runs them when the handler throws after adding them', async () => {
      const failed = await send(target, '/notify', {
        key: 'f1',
        body: { reference: 'f1', fail: true },
      });
      expect(failed.status).toBe(400);
      expect(await sources('f1')).toEqual([]);
      // Hooks run in the order of the commits: once the next request's hook
      // has run, the failed one's would have.
      const next = hookOf('f2');
      expect(
        (
          await send(target, '/notify', {
            key: 'f2',
            body: { reference: 'f2' },
          })
        ).status,
      ).toBe(201);
      await next;
      expect(service.log).toEqual([
        'f1: handler returns',
        'f2: handler returns',
        'f2: failing hook',
        'f2: hook',
      ]);
    });

    it('never runs them for a request abandoned at its deadline', async () => {
      service.late = new Barrier();
      const abandoned = await answer(
        send(target, '/abandoned', { key: 'a1', body: { reference: 'a1' } }),
      );
      expect(abandoned.status).toBe(503);
      expect(abandoned.body).toEqual(UNAVAILABLE);
      service.late.open();
      expect(await sources('a1')).toEqual([]);
      const next = hookOf('a2');
      expect(
        (
          await send(target, '/notify', {
            key: 'a2',
            body: { reference: 'a2' },
          })
        ).status,
      ).toBe(201);
      await next;
      expect(service.log).toEqual([
        'a2: handler returns',
        'a2: failing hook',
        'a2: hook',
      ]);
    });

    it("commits a newTransaction() on its own connection, whatever becomes of the handler's", async () => {
      const failed = await send(target, '/audited', {
        key: 't1',
        body: { reference: 't1', fail: true },
      });
      expect(failed.status).toBe(400);
      // The audit row survived the handler's rollback; the handler's did not.
      expect(await sources('t1')).toEqual(['audit']);

      const done = await send(target, '/audited', {
        key: 't2',
        body: { reference: 't2' },
      });
      expect(done.status).toBe(201);
      const { audit } = (await done.json()) as { audit: string };
      expect(await sources('t2')).toEqual(['audit', 'api']);
      // Two transactions: the audit's is not the one of the record.
      const [{ xid }] = await target.db.query<{ xid: string }>(
        `SELECT xmin::text AS xid FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 't2'`,
      );
      expect(BigInt(xid)).not.toBe(BigInt(audit) % 2n ** 32n);
    });
  },
);
