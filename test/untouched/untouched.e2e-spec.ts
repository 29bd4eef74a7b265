import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import type { Pool } from 'pg';
import { IdempotencyStore } from '../../src/index.js';
import {
  CLAIM,
  completeStatements,
  READ_HOLDER,
} from '../../src/stores/postgres/postgres-statements.js';
import { oneLine, QueryCounter } from './query-counter.js';
import { UntouchedTestModule } from './untouched.module.js';

/** The module's completion, on the test database's `public` tables. */
const { complete: COMPLETE } = completeStatements('public');

describe.each(PLATFORMS)(
  'routes without @Idempotent() and the statement budget (%s)',
  (platform) => {
    let target: TestApp;
    const counter = new QueryCounter();

    beforeAll(async () => {
      target = await startTestApp({
        imports: [UntouchedTestModule],
        platform,
      });
      counter.attach(
        (target.dataSource.driver as unknown as { master: Pool }).master,
      );
    });
    afterAll(() => target.close());
    beforeEach(() => {
      counter.statements = [];
    });

    it('sends no statement for an undecorated route that does not use the database', async () => {
      const response = await fetch(`${target.url}/health`, {
        headers: { 'Idempotency-Key': 'ignored' },
      });
      expect(response.status).toBe(200);
      expect(counter.statements).toEqual([]);
    });

    it('opens no transaction for an undecorated route: only its own statement runs', async () => {
      const response = await send(target, '/plain', {
        key: 'ignored',
        body: { reference: 'p1' },
      });
      expect(response.status).toBe(201);
      expect(counter.statements).toHaveLength(1);
      expect(counter.statements[0]).toMatch(/^INSERT INTO "orders"/);
    });

    it('adds at most 2 statements and no commit to a first execution, and replays in 2: the claim, and the read of what holds the key', async () => {
      await send(target, '/baseline', { body: { reference: 'b1' } });
      const baseline = counter.statements;
      counter.statements = [];
      expect(baseline[0]).toBe('START TRANSACTION');
      expect(baseline.at(-1)).toBe('COMMIT');

      const first = await send(target, '/decorated', {
        key: 'budget-1',
        body: { reference: 'd1' },
      });
      expect(first.status).toBe(201);
      const executed = counter.statements;
      counter.statements = [];
      expect(executed.length - baseline.length).toBeLessThanOrEqual(2);
      expect(executed.filter((s) => s === 'COMMIT')).toHaveLength(1);
      // The claim commits on its own, before the transaction; the record is
      // completed in the handler's transaction, before its COMMIT.
      expect(executed[0]).toBe(oneLine(CLAIM.text));
      // The module's BEGIN marks its transaction, in the same query.
      const begin = executed.findIndex((text) =>
        /^START TRANSACTION; SET LOCAL idempotency\.transaction = '[0-9a-f-]{36}'$/.test(
          text,
        ),
      );
      const finish = executed.indexOf(oneLine(COMPLETE.text));
      expect(begin).toBeGreaterThan(0);
      expect(finish).toBeGreaterThan(begin);
      expect(executed.indexOf('COMMIT')).toBe(finish + 1);

      const replay = await send(target, '/decorated', {
        key: 'budget-1',
        body: { reference: 'd1' },
      });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      const replayed = counter.statements;
      expect(replayed).toEqual([
        oneLine(CLAIM.text),
        oneLine(READ_HOLDER.text),
      ]);
    });

    it("refuses another request under a key a live instance's attempt holds (422) in 2 statements (the claim, and the read of what holds the key): its presence lock is held, so the key is not for the taking", async () => {
      // The attempt of a live instance: this application's own, whose
      // presence lock is held.
      const { heldInstance } = (
        target.app.get(IdempotencyStore) as unknown as {
          presence: { heldInstance: string };
        }
      ).presence;
      expect(heldInstance).toEqual(expect.any(String));
      await target.db.query(
        `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
           status, owner, owner_instance, lease_expires_at, expires_at)
         VALUES ('global', 'held-1', 'another', 'POST', '/decorated',
           'in_progress', gen_random_uuid(), $1, now() + interval '1 minute',
           now() + interval '1 hour')`,
        [heldInstance],
      );
      const refused = await send(target, '/decorated', {
        key: 'held-1',
        body: { reference: 'h1' },
      });
      expect(refused.status).toBe(422);
      expect(counter.statements).toEqual([
        oneLine(CLAIM.text),
        oneLine(READ_HOLDER.text),
      ]);
    });
  },
);
