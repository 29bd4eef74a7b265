import { Controller, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Idempotent, IdempotencyStore } from '../../src/index.js';
import type { ClaimRequest } from '../../src/interfaces/idempotency-store.interface.js';
import { Barrier, untilBlocked } from '../utils/barrier.js';
import { listen } from '../utils/notifications.js';
import { poolOf } from '../utils/statement-counter.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';
import { startAdapterApp } from '../adapters/adapter-app.js';
import { ADAPTERS } from '../adapters/adapters.js';
import { describeStoreConformance } from './conformance.js';

@Controller('by-hand')
class ByHandController {
  @Post()
  @Idempotent()
  create() {
    return { created: true };
  }
}

/** The store of a running application, as the module uses it. */
async function startStore() {
  const target = await startTestApp({
    idempotency: { gc: false },
    controllers: [ByHandController],
  });
  return { target, store: target.app.get<IdempotencyStore>(IdempotencyStore) };
}

// On every data library's adapter: the store is the same, its statements
// go through each library's connection.
for (const fixture of ADAPTERS) {
  describeStoreConformance(`PostgreSQL on ${fixture.name}`, async () => {
    const target = await startAdapterApp(fixture);
    return {
      store: target.app.get<IdempotencyStore>(IdempotencyStore),
      close: () => target.close(),
    };
  });
}

describe('the PostgreSQL store', () => {
  let target: TestApp;
  let store: IdempotencyStore;

  beforeAll(async () => {
    ({ target, store } = await startStore());
  });
  afterAll(() => target?.close());

  const attempt = (key: string): ClaimRequest => ({
    scope: 'pg',
    key,
    owner: randomUUID(),
    fingerprint: 'fp',
    method: 'POST',
    path: '/pg',
    leaseMs: 60_000,
    ttlMs: 3_600_000,
    wait: false,
  });
  const completion = {
    status: 'completed',
    response: { status: 200, headers: {}, body: Buffer.from('ok') },
    ttlMs: 3_600_000,
  } as const;

  /** Completes `claim` (with its ttl) in the transaction on `client`. */
  const completesIn = async (client: pg.PoolClient, claim: ClaimRequest) =>
    expect(
      await store.complete(
        claim,
        { ...completion, ttlMs: claim.ttlMs },
        { client, began: true },
      ),
    ).toEqual({ fenced: true, waiting: false });

  it("forgets a key's steps, but not those that a claim made since its record was forgotten saved: that claim's retry needs them", async () => {
    const stepsOf = async (key: string) =>
      (
        await target.db.query<{ step: string }>(
          `SELECT step FROM idempotency_steps WHERE scope = 'pg' AND key = $1 ORDER BY step`,
          [key],
        )
      ).map((row) => row.step);
    const old = attempt('forget-race');
    await store.claim(old);
    await store.saveStep(old, 'old', 1, 3_600_000);
    // The forget's deletion of steps waits, once its deletion of records
    // committed, while a new claim of the key saves a step.
    const paused = new Barrier();
    let armed = true;
    const pool = poolOf(target.dataSource);
    const wrapped = new WeakSet<object>();
    const pauseStepDeletion = (client: pg.PoolClient) => {
      if (wrapped.has(client)) {
        return;
      }
      wrapped.add(client);
      const query = client.query.bind(client) as (
        ...args: unknown[]
      ) => Promise<unknown>;
      (client as unknown as { query: typeof query }).query = (...args) => {
        const text = (args[0] as { text?: string }).text ?? String(args[0]);
        if (
          armed &&
          text.includes('doomed') &&
          text.includes('idempotency_steps')
        ) {
          armed = false;
          return paused.wait().then(() => query(...args));
        }
        return query(...args);
      };
    };
    const fresh = attempt('forget-race');
    pool.on('acquire', pauseStepDeletion);
    try {
      const forgetting = store.forgetRecords!('pg', 'forget-race', 10);
      await paused.reached(1);
      expect(await store.claim(fresh)).toMatchObject({ state: 'claimed' });
      await store.saveStep(fresh, 'new', 2, 3_600_000);
      paused.open();
      expect(await forgetting).toMatchObject({ records: 1, steps: 1 });
    } finally {
      pool.removeListener('acquire', pauseStepDeletion);
    }
    expect(await stepsOf('forget-race')).toEqual(['new']);
    expect(await store.readStep(fresh, 'new')).toEqual({ result: 2 });
  });

  it("completes with a heap-only update, keeping the claim's expiry (ttl after the claim), unless that is past or further than ttl away", async () => {
    const pool = poolOf(target.dataSource);
    const expiry = async (key: string) =>
      (
        await target.db.query<{ expires_at: Date; ms: number }>(
          `SELECT expires_at,
             (extract(epoch FROM expires_at - coalesce(completed_at, created_at)) * 1000)::float8 AS ms
           FROM idempotency_records WHERE scope = 'pg' AND key = $1`,
          [key],
        )
      )[0];
    // A claim leased for less than its ttl (the usual case), one leased for
    // longer, and one whose ttl ran out while its handler ran.
    const usual = { ...attempt('hot-usual'), leaseMs: 1_000 };
    const longLease = { ...attempt('hot-long-lease'), ttlMs: 1_000 };
    const outlived = { ...attempt('hot-outlived'), leaseMs: 1_000 };
    for (const claim of [usual, longLease, outlived]) {
      expect(await store.claim(claim)).toMatchObject({ state: 'claimed' });
    }
    await target.db.query(
      `UPDATE idempotency_records SET expires_at = now() - interval '1 second'
       WHERE scope = 'pg' AND key = $1`,
      [outlived.key],
    );
    const claimed = await expiry(usual.key);
    expect(claimed.ms).toBeCloseTo(usual.ttlMs, -1);

    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const updates = async () =>
        (
          await client.query<{ updated: number; hot: number }>(
            `SELECT n_tup_upd::int AS updated, n_tup_hot_upd::int AS hot
             FROM pg_stat_xact_user_tables WHERE relname = 'idempotency_records'`,
          )
        ).rows[0];
      const before = await updates();
      expect(
        await store.complete(usual, completion, { client, began: true }),
      ).toEqual({ fenced: true, waiting: false });
      // Counted in this transaction: one update, heap-only (no index touched).
      const after = await updates();
      expect(after.updated - before.updated).toBe(1);
      expect(after.hot - before.hot).toBe(1);
      for (const claim of [longLease, outlived]) {
        await completesIn(client, claim);
      }
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect((await expiry(usual.key)).expires_at).toEqual(claimed.expires_at);
    // Moved to ttl after the completion: never replayed past it, nor born
    // expired.
    expect((await expiry(longLease.key)).ms).toBeCloseTo(1_000, -1);
    expect((await expiry(outlived.key)).ms).toBeCloseTo(outlived.ttlMs, -1);
  });

  it("dates the completion by its own statement, not by the handler's transaction's start: a transaction longer than the ttl never commits a record already expired", async () => {
    const pool = poolOf(target.dataSource);
    const claim = { ...attempt('long-transaction'), ttlMs: 100 };
    await store.claim(claim);
    const client = await pool.connect();
    let slept: Date;
    try {
      await client.query('BEGIN');
      // The handler's transaction lasts longer than the ttl.
      ({
        rows: [{ slept }],
      } = await client.query<{ slept: Date }>(
        'SELECT pg_sleep(0.2), clock_timestamp() AS slept',
      ));
      await completesIn(client, claim);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const [record] = await target.db.query<{
      completed_at: Date;
      expires_at: Date;
      ms: number;
    }>(
      `SELECT completed_at, expires_at,
         (extract(epoch FROM expires_at - completed_at) * 1000)::float8 AS ms
       FROM idempotency_records WHERE scope = 'pg' AND key = $1`,
      [claim.key],
    );
    expect(record.completed_at.getTime()).toBeGreaterThanOrEqual(
      slept.getTime(),
    );
    expect(record.expires_at.getTime()).toBeGreaterThan(slept.getTime());
    expect(record.ms).toBeCloseTo(claim.ttlMs, -1);
  });

  it("completes in the handler's transaction: the record commits or rolls back with it", async () => {
    expect(store.completesInTransaction).toBe(true);
    const pool = poolOf(target.dataSource);
    for (const outcome of ['ROLLBACK', 'COMMIT'] as const) {
      const claim = attempt(`in-transaction-${outcome}`);
      await store.claim(claim);
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query(`INSERT INTO orders (reference) VALUES ($1)`, [
          claim.key,
        ]);
        expect(
          await store.complete(claim, completion, { client, began: true }),
        ).toEqual({
          fenced: true,
          waiting: false,
        });
        await client.query(outcome);
      } finally {
        client.release();
      }
      expect(
        await target.db.query(
          `SELECT r.status, (SELECT count(*)::int FROM orders o WHERE o.reference = r.key) AS orders
           FROM idempotency_records r WHERE r.key = $1`,
          [claim.key],
        ),
      ).toEqual([
        outcome === 'COMMIT'
          ? { status: 'completed', orders: 1 }
          : { status: 'in_progress', orders: 0 },
      ]);
    }
  });

  /**
   * Runs `during` in a transaction of another session, then the store's
   * claim of `request`, which blocks on what that transaction wrote; then
   * commits it, and gives the claim's outcome. The claim's statement began
   * before the commit: what it reads is from before it.
   */
  async function claimAcross(
    request: ClaimRequest,
    during: (other: pg.Client) => Promise<unknown>,
  ) {
    const other = new pg.Client({ connectionString: target.db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await during(other);
      const outcome = store.claim(request);
      await untilBlocked(target.db, 1);
      await other.query('COMMIT');
      return await outcome;
    } finally {
      await other.end();
    }
  }

  it('claims again when a claim committed after its statement began holds the key: it answers what holds it', async () => {
    const held = randomUUID();
    const outcome = await claimAcross(attempt('raced'), (other) =>
      other.query(
        `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
           status, owner, lease_expires_at, expires_at)
         VALUES ('pg', 'raced', 'another', 'POST', '/pg', 'in_progress', $1,
           now() + interval '1 minute', now() + interval '1 hour')`,
        [held],
      ),
    );
    expect(outcome).toEqual({
      state: 'in_progress',
      fingerprint: 'another',
      leaseMs: expect.any(Number),
    });
  });

  it('claims again when the claim a duplicate would wait for finished after its statement began: it gets the response, not a wait', async () => {
    const first = attempt('waited');
    expect((await store.claim(first)).state).toBe('claimed');
    const outcome = await claimAcross(
      { ...attempt('waited'), wait: true },
      (other) =>
        other.query(
          `UPDATE idempotency_records SET status = 'completed',
           response_status = 200, response_body = 'done', lease_expires_at = NULL
         WHERE key = 'waited' AND owner = $1`,
          [first.owner],
        ),
    );
    expect(outcome).toEqual({
      state: 'finished',
      record: {
        status: 'completed',
        fingerprint: 'fp',
        response: { status: 200, headers: {}, body: Buffer.from('done') },
      },
    });
    expect(
      await target.db.query(
        `SELECT status, waiting FROM idempotency_records WHERE key = 'waited'`,
      ),
    ).toEqual([{ status: 'completed', waiting: false }]);
  });

  it('refuses a record whose status the module never writes (changed by hand: the table has no check on it), instead of replaying it as finished; an expired one is taken over', async () => {
    await target.db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
         status, response_status, response_body, expires_at)
       VALUES ('pg', 'by-hand', 'fp', 'POST', '/pg', 'complete', 200, 'ok',
         now() + interval '1 hour'),
       ('pg', 'by-hand-expired', 'fp', 'POST', '/pg', 'complete', 200, 'ok',
         now() - interval '1 second')`,
    );
    await expect(store.claim(attempt('by-hand'))).rejects.toThrow(
      'The idempotency record of the key has the status "complete", which the module never writes',
    );
    expect(
      await target.db.query(
        `SELECT status FROM idempotency_records WHERE key = 'by-hand'`,
      ),
    ).toEqual([{ status: 'complete' }]);
    expect((await store.claim(attempt('by-hand-expired'))).state).toBe(
      'claimed',
    );

    // Over HTTP: 503, and the record as it was.
    await target.db.query(
      `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
         status, response_status, response_body, expires_at)
       VALUES ('global', 'by-hand', 'fp', 'POST', '/by-hand', 'complete', 200,
         'ok', now() + interval '1 hour')`,
    );
    const answer = await send(target, '/by-hand', { key: 'by-hand' });
    expect(answer.status).toBe(503);
    expect(
      await target.db.query(
        `SELECT status FROM idempotency_records WHERE scope = 'global'`,
      ),
    ).toEqual([{ status: 'complete' }]);
  });

  it('notifies the completion of each key on the channel waiters listen on', async () => {
    const listener = await listen(target.db.url, 'idempotency_records');
    try {
      await store.notify([attempt('notified-1'), attempt('notified-2')]);
      await listener.next(() => true, 2);
      expect(await listener.drain()).toEqual([
        'pg\u001fnotified-1',
        'pg\u001fnotified-2',
      ]);
    } finally {
      await listener.close();
    }
  });

  it('writes the owner, the lease and the waiting flag into the row, and collects the rows themselves', async () => {
    const claim = attempt('row');
    await store.claim(claim);
    await store.claim({ ...attempt('row'), wait: true });
    expect(
      await target.db.query(
        `SELECT status, owner, waiting,
                lease_expires_at BETWEEN now() + interval '50 seconds' AND now() + interval '61 seconds' AS leased
         FROM idempotency_records WHERE key = 'row'`,
      ),
    ).toEqual([
      {
        status: 'in_progress',
        owner: claim.owner,
        waiting: true,
        leased: true,
      },
    ]);
    await store.complete(claim, { ...completion, ttlMs: 0 }, undefined);
    await store.collect(1000, () => undefined);
    expect(
      await target.db.query(
        `SELECT 1 FROM idempotency_records WHERE key = 'row'`,
      ),
    ).toEqual([]);
  });

  it('counts failed attempts in a row of idempotency_failures that the collection deletes once expired', async () => {
    const failures = () =>
      target.db.query(
        `SELECT key, failures, expires_at > now() + interval '50 minutes' AS live
         FROM idempotency_failures WHERE scope = 'pg' ORDER BY key`,
      );
    await store.countFailure!({ scope: 'pg', key: 'failing' }, 3_600_000);
    await store.countFailure!({ scope: 'pg', key: 'failing' }, 3_600_000);
    await store.countFailure!({ scope: 'pg', key: 'expired' }, 0);
    expect(await failures()).toEqual([
      { key: 'expired', failures: 1, live: false },
      { key: 'failing', failures: 2, live: true },
    ]);
    await store.collect(1000, () => undefined);
    expect(await failures()).toEqual([
      { key: 'failing', failures: 2, live: true },
    ]);
  });

  it('refuses to count on a database without migration CountIdempotencyFailures1764000000006, saying so, and collects there still', async () => {
    await target.db.query(
      'ALTER TABLE idempotency_failures RENAME TO idempotency_failures_aside',
    );
    try {
      await expect(
        store.countFailure!({ scope: 'pg', key: 'unmigrated' }, 60_000),
      ).rejects.toThrow(/CountIdempotencyFailures1764000000006/);
      await expect(store.collect(1000, () => undefined)).resolves.toEqual({
        removed: expect.any(Number),
        more: false,
      });
    } finally {
      await target.db.query(
        'ALTER TABLE idempotency_failures_aside RENAME TO idempotency_failures',
      );
    }
  });
});
