import pg from 'pg';
import { DataSource } from 'typeorm';
import { idempotencyMigrations } from '../../src/index.js';
import { untilAdvisoryLocks } from '../utils/barrier.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/** A lock of the test's own, far from the hashes of (scope, key). */
const GATE = 424242;

interface ClaimRow {
  fingerprint_locked: boolean;
  locked: boolean;
  status: string | null;
  fingerprint: string | null;
}

describe('the functions of the shipped migrations', () => {
  let db: TestDatabase;
  let claimer: pg.Client;

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
    claimer = new pg.Client({ connectionString: db.url });
    await claimer.connect();
  });
  afterAll(async () => {
    await claimer.end();
    await db.drop();
  });

  it('idempotency_claim reads the record after taking the locks: it sees a record committed after its statement began', async () => {
    // The claiming statement takes its snapshot, then waits at the gate
    // before its call of idempotency_claim (which depends on the gate's row).
    await db.query(`SELECT pg_advisory_lock(${GATE})`);
    const claiming = claimer.query<ClaimRow>(
      `SELECT c.fingerprint_locked, c.locked, c.status, c.fingerprint
       FROM (SELECT pg_advisory_lock(${GATE})::text AS gate) g,
         LATERAL idempotency_claim('s' || g.gate, 'k', 'f', '30000') c`,
    );
    await untilAdvisoryLocks(db, 'waiting', 1);
    // Meanwhile the key completes and commits, and lets go of its lock.
    await db.query(
      `SELECT idempotency_complete('s', 'k', 'f', 'POST', '/p', 'completed', 201, '{}', '\\x7b7d', 60000)`,
    );
    await db.query(`SELECT pg_advisory_unlock(${GATE})`);

    const { rows } = await claiming;
    // A snapshot from the start of the statement would show no record, and
    // the request would run a second time.
    expect(rows).toEqual([
      {
        fingerprint_locked: true,
        locked: true,
        status: 'completed',
        fingerprint: 'f',
      },
    ]);
    await claimer.query(`SELECT pg_advisory_unlock_all()`);
  });
});
