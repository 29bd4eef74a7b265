import { requestFingerprint } from '../../src/http/request-fingerprint.js';
import { Barrier, untilAdvisoryLocks } from '../utils/barrier.js';
import { holdInTransaction } from '../utils/test-database.js';
import { send, PLATFORMS, type TestApp } from '../utils/test-app.js';
import { useContractApp } from './contract-app.js';
import type { Runs } from './contract.module.js';

describe.each(PLATFORMS)('request fingerprints (%s)', (platform) => {
  let target: TestApp;
  let runs: Runs;

  useContractApp(platform, (app) => ({ target, runs } = app));
  beforeEach(() => {
    runs.barrier = new Barrier();
  });

  it('counts only the included fields', async () => {
    await send(target, '/fingerprint/include', {
      key: 'inc-1',
      body: { amount: 1, currency: 'EUR', note: 'a' },
    });
    const sameFields = await send(target, '/fingerprint/include', {
      key: 'inc-1',
      body: { currency: 'EUR', amount: 1, note: 'b' },
    });
    expect(sameFields.headers.get('idempotent-replayed')).toBe('true');
    const otherAmount = await send(target, '/fingerprint/include', {
      key: 'inc-1',
      body: { amount: 2, currency: 'EUR' },
    });
    expect(otherAmount.status).toBe(422);
  });

  it('ignores the excluded fields', async () => {
    await send(target, '/fingerprint/exclude', {
      key: 'exc-1',
      body: { amount: 1, sentAt: 1 },
    });
    const resent = await send(target, '/fingerprint/exclude', {
      key: 'exc-1',
      body: { amount: 1, sentAt: 2 },
    });
    expect(resent.headers.get('idempotent-replayed')).toBe('true');
    const changed = await send(target, '/fingerprint/exclude', {
      key: 'exc-1',
      body: { amount: 3, sentAt: 2 },
    });
    expect(changed.status).toBe(422);
  });

  it('uses a custom fingerprint function', async () => {
    await send(target, '/fingerprint/custom', {
      key: 'cus-1',
      body: { amount: 1, x: 'a' },
    });
    const same = await send(target, '/fingerprint/custom', {
      key: 'cus-1',
      body: { amount: 1, x: 'b' },
    });
    expect(same.headers.get('idempotent-replayed')).toBe('true');
    expect(
      (
        await send(target, '/fingerprint/custom', {
          key: 'cus-1',
          body: { amount: 2 },
        })
      ).status,
    ).toBe(422);
  });

  it('refuses another payload with 422 while the first request is still running; the same payload gets 409', async () => {
    const first = send(target, '/fingerprint/held', {
      key: 'run-1',
      body: { reference: 'held-1' },
    });
    await runs.barrier.reached(1);
    const other = await send(target, '/fingerprint/held', {
      key: 'run-1',
      body: { reference: 'held-2' },
    });
    expect(other.status).toBe(422);
    expect(((await other.json()) as { type: string }).type).toBe(
      'urn:idempotency:key-reused',
    );
    const same = await send(target, '/fingerprint/held', {
      key: 'run-1',
      body: { reference: 'held-1' },
    });
    expect(same.status).toBe(409);
    runs.barrier.open();
    const done = await first;
    expect(done.status).toBe(201);
    expect(await done.json()).toEqual({
      run: 1,
      body: { reference: 'held-1' },
    });
    expect(runs.counts['fingerprint/held']).toBe(1);
    const rows = await target.db.query(
      `SELECT reference FROM orders WHERE reference LIKE 'held-%'`,
    );
    expect(rows).toEqual([{ reference: 'held-1' }]);
  });

  it('in wait mode, refuses another payload at once instead of waiting, and replays the same payload', async () => {
    const first = send(target, '/fingerprint/held-wait', {
      key: 'wait-1',
      body: { n: 1 },
    });
    await runs.barrier.reached(1);
    const other = await send(target, '/fingerprint/held-wait', {
      key: 'wait-1',
      body: { n: 2 },
    });
    expect(other.status).toBe(422);
    const same = send(target, '/fingerprint/held-wait', {
      key: 'wait-1',
      body: { n: 1 },
    });
    await untilAdvisoryLocks(target.db, 'waiting', 1);
    runs.barrier.open();
    expect((await first).status).toBe(201);
    const replayed = await same;
    expect(replayed.status).toBe(201);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.counts['fingerprint/held-wait']).toBe(1);
  });

  const keyLock = `SELECT pg_advisory_xact_lock(hashtextextended('global' || chr(31) || $1, 0))`;

  it('never lets a request hold the key without its fingerprint lock (identical duplicates never get 422)', async () => {
    // Another session holds this request's fingerprint lock, as a duplicate
    // does for the instant of its claim: the request must not take the key.
    const body = { reference: 'fp-lock' };
    const fingerprint = requestFingerprint('POST', '/fingerprint/held', body);
    const runsBefore = runs.counts['fingerprint/held'] ?? 0;
    const held = await holdInTransaction(
      target.db.url,
      `SELECT pg_advisory_xact_lock(hashtextextended('global' || chr(31) || $1 || chr(31) || $2, 0))`,
      ['fp-1', fingerprint],
    );
    try {
      const blocked = await send(target, '/fingerprint/held', {
        key: 'fp-1',
        body,
      });
      expect(blocked.status).toBe(409);
      expect(runs.counts['fingerprint/held'] ?? 0).toBe(runsBefore);
    } finally {
      await held.release();
    }
    runs.barrier.open();
    const executed = await send(target, '/fingerprint/held', {
      key: 'fp-1',
      body,
    });
    expect(executed.status).toBe(201);
    expect(runs.counts['fingerprint/held']).toBe(runsBefore + 1);
  });

  it('takes a key whose holder is just ending, instead of answering 422', async () => {
    // Another session holds the key's lock without a fingerprint lock, as a
    // request does for the instant it releases its locks.
    const ending = await holdInTransaction(target.db.url, keyLock, [
      'ending-1',
    ]);
    try {
      runs.barrier.open();
      const request = send(target, '/fingerprint/held', {
        key: 'ending-1',
        body: { reference: 'ending-1' },
      });
      await untilAdvisoryLocks(target.db, 'waiting', 1);
      await ending.release();
      expect((await request).status).toBe(201);
    } finally {
      await ending.release();
    }
    // Held for good, it is a different request: 422 after the short wait.
    const stuck = await holdInTransaction(target.db.url, keyLock, ['ending-2']);
    try {
      const refused = await send(target, '/fingerprint/held', {
        key: 'ending-2',
        body: { reference: 'ending-2' },
      });
      expect(refused.status).toBe(422);
    } finally {
      await stuck.release();
    }
  });
});
