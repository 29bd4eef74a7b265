import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_STEPS_TABLE_NAME,
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
} from '../../migrations/index.js';
import { untilAdvisoryLocks, untilBlocked } from '../utils/barrier.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/** A lock of the test's own, far from the hashes of instances. */
const GATE = 424242;

interface AcquireRow {
  acquired: boolean;
  status: string | null;
  fingerprint: string | null;
  response_status: number | null;
  response_headers: Record<string, string> | null;
  response_body: Buffer | null;
  lease_ms: number | null;
}

interface Claim {
  key: string;
  owner: string;
  fingerprint?: string;
  instance?: string | null;
  leaseMs?: number;
  ttlMs?: number;
  wait?: boolean;
}

const ACQUIRE = `SELECT * FROM idempotency_acquire('s', $1, $2, 'POST', '/p', $3, $4, $5, $6, $7)`;

function acquireParams(claim: Claim): unknown[] {
  return [
    claim.key,
    claim.fingerprint ?? 'f',
    claim.owner,
    claim.instance ?? null,
    claim.leaseMs ?? 60_000,
    claim.ttlMs ?? 60_000,
    claim.wait ?? false,
  ];
}

/** The answer of `idempotency_acquire` for a claim still held by another. */
const held = (fingerprint = 'f') => ({
  acquired: false,
  status: 'in_progress',
  fingerprint,
  response_status: null,
  response_headers: null,
  response_body: null,
  lease_ms: expect.any(Number),
});

describe('the functions of the leased claims (LeaseIdempotencyClaims1764000000003)', () => {
  let db: TestDatabase;
  let other: pg.Client;
  /** A session whose statement blocks while the test watches from `db`. */
  let blocked: pg.Client;

  beforeAll(async () => {
    db = await createTestDatabase();
    const dataSource = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: idempotencyMigrations,
    });
    await dataSource.initialize();
    await dataSource.runMigrations();
    await dataSource.destroy();
    other = new pg.Client({ connectionString: db.url });
    await other.connect();
    blocked = new pg.Client({ connectionString: db.url });
    await blocked.connect();
  });
  afterAll(async () => {
    await other.end();
    await blocked.end();
    await db.drop();
  });
  afterEach(async () => {
    await db.query(
      `TRUNCATE ${IDEMPOTENCY_TABLE_NAME}, ${IDEMPOTENCY_STEPS_TABLE_NAME}`,
    );
  });

  const acquire = async (claim: Claim) =>
    (await db.query<AcquireRow>(ACQUIRE, acquireParams(claim)))[0];
  const finish = async (key: string, owner: string, body = 'done') =>
    (
      await db.query<{ finished: boolean; waiting: boolean }>(
        `SELECT * FROM idempotency_finish('s', $1, $2, 'completed', 201, '{"x-a":"1"}', $3, 60000)`,
        [key, owner, Buffer.from(body)],
      )
    )[0];
  const release = async (key: string, owner: string) =>
    (
      await db.query<{ released: boolean; waiting: boolean }>(
        `SELECT * FROM idempotency_release('s', $1, $2)`,
        [key, owner],
      )
    )[0];
  const saveStep = async (key: string, owner: string, step: string) =>
    (
      await db.query<{ saved: boolean }>(
        `SELECT idempotency_save_step('s', $1, $2, $3, '{"id":1}', 60000) AS saved`,
        [key, owner, step],
      )
    )[0].saved;
  const record = async (key: string) =>
    (
      await db.query<{
        status: string;
        owner: string | null;
        owner_instance: string | null;
        waiting: boolean;
        lease_left_ms: number | null;
        ttl_left_ms: number;
        response_body: Buffer | null;
      }>(
        `SELECT status, owner, owner_instance, waiting, response_body,
                (extract(epoch FROM lease_expires_at - now()) * 1000)::float8 AS lease_left_ms,
                (extract(epoch FROM expires_at - now()) * 1000)::float8 AS ttl_left_ms
         FROM ${IDEMPOTENCY_TABLE_NAME} WHERE scope = 's' AND key = $1`,
        [key],
      )
    )[0];
  const steps = async (key: string) =>
    (
      await db.query<{ step: string }>(
        `SELECT step FROM ${IDEMPOTENCY_STEPS_TABLE_NAME} WHERE scope = 's' AND key = $1 ORDER BY step`,
        [key],
      )
    ).map((row) => row.step);
  const expireLease = (key: string) =>
    db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET lease_expires_at = now() - interval '1 second' WHERE key = $1`,
      [key],
    );

  it('idempotency_acquire claims a new key with an in_progress row that names its owner, instance and lease', async () => {
    const owner = randomUUID();
    const instance = randomUUID();
    expect(
      await acquire({
        key: 'new',
        owner,
        instance,
        leaseMs: 5_000,
        ttlMs: 60_000,
      }),
    ).toEqual({
      acquired: true,
      status: null,
      fingerprint: null,
      response_status: null,
      response_headers: null,
      response_body: null,
      lease_ms: null,
    });
    const row = await record('new');
    expect(row).toMatchObject({
      status: 'in_progress',
      owner,
      owner_instance: instance,
      waiting: false,
      response_body: null,
    });
    expect(row.lease_left_ms).toBeGreaterThan(4_000);
    expect(row.lease_left_ms).toBeLessThanOrEqual(5_000);
    // Kept at least as long as the lease, and as the ttl.
    expect(row.ttl_left_ms).toBeGreaterThan(59_000);
    expect(
      (await acquire({ key: 'long-lease', owner, leaseMs: 90_000, ttlMs: 10 }))
        .acquired,
    ).toBe(true);
    expect((await record('long-lease')).ttl_left_ms).toBeGreaterThan(89_000);
  });

  it('idempotency_acquire reports a live claim without touching it; only a duplicate that waits marks it waited for', async () => {
    const owner = randomUUID();
    await acquire({ key: 'busy', owner, leaseMs: 5_000 });
    const duplicate = await acquire({ key: 'busy', owner: randomUUID() });
    expect(duplicate).toEqual(held());
    expect(duplicate.lease_ms).toBeGreaterThan(4_000);
    expect(duplicate.lease_ms).toBeLessThanOrEqual(5_000);
    expect(await record('busy')).toMatchObject({ owner, waiting: false });

    // Another request with the key: reported with its own fingerprint, and
    // not waited for (it gets 422, whatever its mode).
    expect(
      await acquire({
        key: 'busy',
        owner: randomUUID(),
        fingerprint: 'other',
        wait: true,
      }),
    ).toEqual(held('f'));
    expect(await record('busy')).toMatchObject({ owner, waiting: false });

    expect(
      await acquire({ key: 'busy', owner: randomUUID(), wait: true }),
    ).toEqual(held());
    expect(await record('busy')).toMatchObject({ owner, waiting: true });
  });

  it('idempotency_acquire takes over a claim whose lease ran out, and clears its waiting mark', async () => {
    const first = randomUUID();
    await acquire({ key: 'expired', owner: first });
    await acquire({ key: 'expired', owner: randomUUID(), wait: true });
    await expireLease('expired');
    const second = randomUUID();
    expect((await acquire({ key: 'expired', owner: second })).acquired).toBe(
      true,
    );
    expect(await record('expired')).toMatchObject({
      status: 'in_progress',
      owner: second,
      waiting: false,
    });
  });

  it("idempotency_acquire takes over a live claim at once when its instance's presence lock is free, never while it is held", async () => {
    const instance = randomUUID();
    const presence = new pg.Client({ connectionString: db.url });
    await presence.connect();
    try {
      await presence.query(
        `SELECT pg_advisory_lock(hashtextextended('idempotency:' || $1, 0))`,
        [instance],
      );
      const first = randomUUID();
      await acquire({ key: 'present', owner: first, instance });
      expect(await acquire({ key: 'present', owner: randomUUID() })).toEqual(
        held(),
      );
      expect(await record('present')).toMatchObject({ owner: first });
    } finally {
      // The instance is gone: its session, and its lock, with it.
      await presence.end();
    }
    const second = randomUUID();
    expect((await acquire({ key: 'present', owner: second })).acquired).toBe(
      true,
    );
    expect(await record('present')).toMatchObject({
      owner: second,
      owner_instance: null,
    });
    // The claimer's own try-lock ended with its statement.
    await untilAdvisoryLocks(db, 'held', 0);
  });

  it('idempotency_acquire returns a finished, live record to replay, and takes an expired one over', async () => {
    const owner = randomUUID();
    await acquire({ key: 'done', owner });
    await finish('done', owner, 'body');
    expect(await acquire({ key: 'done', owner: randomUUID() })).toEqual({
      acquired: false,
      status: 'completed',
      fingerprint: 'f',
      response_status: 201,
      response_headers: { 'x-a': '1' },
      response_body: Buffer.from('body'),
      lease_ms: 0,
    });
    await db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET expires_at = now() - interval '1 second' WHERE key = 'done'`,
    );
    const next = randomUUID();
    expect(
      (await acquire({ key: 'done', owner: next, fingerprint: 'g' })).acquired,
    ).toBe(true);
    expect(await record('done')).toMatchObject({
      status: 'in_progress',
      owner: next,
      response_body: null,
    });
  });

  it('idempotency_acquire reads the record after its statement began: it replays a completion committed meanwhile', async () => {
    // The claiming statement takes its snapshot, then waits at the gate
    // before its call of idempotency_acquire (which depends on the gate's row).
    await db.query(`SELECT pg_advisory_lock(${GATE})`);
    const claiming = other.query<AcquireRow>(
      `SELECT c.* FROM (SELECT pg_advisory_lock(${GATE})::text AS gate) g,
         LATERAL idempotency_acquire('s' || g.gate, 'k', 'f', 'POST', '/p',
           gen_random_uuid(), NULL, 60000, 60000, false) c`,
    );
    await untilAdvisoryLocks(db, 'waiting', 1);
    // Meanwhile the key is claimed, completes and commits.
    const owner = randomUUID();
    await acquire({ key: 'k', owner });
    await finish('k', owner, '{}');
    await db.query(`SELECT pg_advisory_unlock(${GATE})`);

    const { rows } = await claiming;
    // A snapshot from the start of the statement would show no record: the
    // claim would neither replay it nor take it.
    expect(rows).toEqual([
      expect.objectContaining({
        acquired: false,
        status: 'completed',
        fingerprint: 'f',
      }),
    ]);
    await other.query(`SELECT pg_advisory_unlock_all()`);
  });

  it('idempotency_finish writes the response only for the owner of a claim in progress, and clears the steps of its key', async () => {
    const owner = randomUUID();
    await acquire({ key: 'fin', owner });
    await acquire({ key: 'fin', owner: randomUUID(), wait: true });
    expect(await saveStep('fin', owner, 'charge')).toBe(true);
    const neighbour = randomUUID();
    await acquire({ key: 'neighbour', owner: neighbour });
    expect(await saveStep('neighbour', neighbour, 'charge')).toBe(true);

    expect(await finish('fin', randomUUID())).toEqual({
      finished: false,
      waiting: false,
    });
    expect(await record('fin')).toMatchObject({ status: 'in_progress', owner });
    expect(await steps('fin')).toEqual(['charge']);

    expect(await finish('fin', owner, 'body')).toEqual({
      finished: true,
      waiting: true,
    });
    const row = await record('fin');
    expect(row).toMatchObject({ status: 'completed', owner });
    expect(row.response_body).toEqual(Buffer.from('body'));
    expect(row.lease_left_ms).toBeNull();
    expect(await steps('fin')).toEqual([]);
    expect(await steps('neighbour')).toEqual(['charge']);
    // Finished once: a second completion writes nothing.
    expect(await finish('fin', owner, 'again')).toEqual({
      finished: false,
      waiting: false,
    });
    expect((await record('fin')).response_body).toEqual(Buffer.from('body'));
  });

  it('idempotency_release deletes a claim in progress of its owner only', async () => {
    const owner = randomUUID();
    await acquire({ key: 'rel', owner });
    expect(await release('rel', randomUUID())).toEqual({
      released: false,
      waiting: false,
    });
    expect(await record('rel')).toMatchObject({ owner });
    await acquire({ key: 'rel', owner: randomUUID(), wait: true });
    expect(await release('rel', owner)).toEqual({
      released: true,
      waiting: true,
    });
    expect(await record('rel')).toBeUndefined();

    const done = randomUUID();
    await acquire({ key: 'rel-done', owner: done });
    await finish('rel-done', done);
    expect(await release('rel-done', done)).toEqual({
      released: false,
      waiting: false,
    });
    expect(await record('rel-done')).toMatchObject({ status: 'completed' });
  });

  it('idempotency_renew extends the leases still held, each by its own duration, and names their owners', async () => {
    const [a, b, lost, done] = [
      randomUUID(),
      randomUUID(),
      randomUUID(),
      randomUUID(),
    ];
    await acquire({ key: 'a', owner: a, leaseMs: 1_000 });
    await acquire({ key: 'b', owner: b, leaseMs: 1_000 });
    await acquire({ key: 'lost', owner: lost });
    await expireLease('lost');
    await acquire({ key: 'lost', owner: randomUUID() });
    await acquire({ key: 'done', owner: done });
    await finish('done', done);

    const renewed = await db.query<{ owner: string }>(
      `SELECT owner FROM idempotency_renew($1, $2, $3, $4) AS owner`,
      [
        ['s', 's', 's', 's'],
        ['a', 'b', 'lost', 'done'],
        [a, b, lost, done],
        [30_000, 50_000, 30_000, 30_000],
      ],
    );
    expect(renewed.map((row) => row.owner).sort()).toEqual([a, b].sort());
    const leaseA = (await record('a')).lease_left_ms!;
    const leaseB = (await record('b')).lease_left_ms!;
    expect(leaseA).toBeGreaterThan(29_000);
    expect(leaseA).toBeLessThanOrEqual(30_000);
    expect(leaseB).toBeGreaterThan(49_000);
    expect(leaseB).toBeLessThanOrEqual(50_000);
    expect((await record('done')).lease_left_ms).toBeNull();
  });

  it('idempotency_save_step commits a step for the owner of a claim in progress only', async () => {
    const owner = randomUUID();
    await acquire({ key: 'st', owner });
    expect(await saveStep('st', randomUUID(), 'charge')).toBe(false);
    expect(await steps('st')).toEqual([]);
    expect(await saveStep('st', owner, 'charge')).toBe(true);
    // Saved again (a step retried after its commit was lost): one row.
    expect(await saveStep('st', owner, 'charge')).toBe(true);
    expect(await steps('st')).toEqual(['charge']);
    await finish('st', owner);
    expect(await saveStep('st', owner, 'late')).toBe(false);
    expect(await steps('st')).toEqual([]);
  });

  it('idempotency_save_step and a takeover never interleave: a takeover waits for the step being written, and a step written after a takeover is refused', async () => {
    const first = randomUUID();
    await acquire({ key: 'race', owner: first });
    await expireLease('race');

    // The step's transaction has checked the claim (and locks its row)...
    await other.query('BEGIN');
    await other.query(
      `SELECT idempotency_save_step('s', 'race', $1, 'charge', '{"id":1}', 60000)`,
      [first],
    );
    // ...so the takeover waits for it to commit.
    const second = randomUUID();
    const takeover = blocked.query<AcquireRow>(
      ACQUIRE,
      acquireParams({ key: 'race', owner: second }),
    );
    await untilBlocked(db, 1);
    await other.query('COMMIT');
    expect((await takeover).rows[0].acquired).toBe(true);
    expect(await steps('race')).toEqual(['charge']);

    // The reverse: the takeover has not committed yet when the former
    // owner's step is written; the step waits, then sees the new owner.
    await expireLease('race');
    await other.query('BEGIN');
    const third = randomUUID();
    await other.query(ACQUIRE, acquireParams({ key: 'race', owner: third }));
    const late = blocked.query<{ saved: boolean }>(
      `SELECT idempotency_save_step('s', 'race', $1, 'receipt', '{"id":2}', 60000) AS saved`,
      [second],
    );
    await untilBlocked(db, 1);
    await other.query('COMMIT');
    expect((await late).rows[0].saved).toBe(false);
    expect(await steps('race')).toEqual(['charge']);
    expect(await record('race')).toMatchObject({ owner: third });
  });
});
