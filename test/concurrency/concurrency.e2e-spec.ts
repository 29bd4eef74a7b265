import { Barrier, untilWaiting } from '../utils/barrier.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { ConcurrencyTestModule, Gate } from './concurrency.module.js';

const DUPLICATES = 50;

interface Answer {
  status: number;
  replayed: boolean;
  retryAfter: string | null;
  contentType: string | null;
  body: string;
}

async function answer(response: Promise<Response>): Promise<Answer> {
  const r = await response;
  return {
    status: r.status,
    replayed: r.headers.get('idempotent-replayed') === 'true',
    retryAfter: r.headers.get('retry-after'),
    contentType: r.headers.get('content-type'),
    body: await r.text(),
  };
}

/** Sends `count` identical requests at once; resolves `settled(n)` as answers arrive. */
function burst(
  target: TestApp,
  path: string,
  key: string,
  reference: string,
  count: number,
) {
  let done = 0;
  const watchers: Array<{ n: number; resolve: () => void }> = [];
  const all = Array.from({ length: count }, () =>
    answer(send(target, path, { key, body: { reference } })).then((a) => {
      done += 1;
      watchers.filter((w) => done >= w.n).forEach((w) => w.resolve());
      return a;
    }),
  );
  const settled = (n: number) =>
    done >= n
      ? Promise.resolve()
      : new Promise<void>((resolve) => watchers.push({ n, resolve }));
  return { all: Promise.all(all), settled };
}

describe.each(PLATFORMS)('concurrent duplicates (%s)', (platform) => {
  let target: TestApp;
  let gate: Gate;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [ConcurrencyTestModule],
      typeorm: { poolSize: DUPLICATES + 10 },
      platform,
    });
    gate = target.app.get(Gate);
  });
  afterAll(() => target.close());
  beforeEach(() => {
    gate.barrier = new Barrier();
    gate.runs = 0;
  });

  const rows = async (reference: string) =>
    (
      await target.db.query('SELECT id FROM orders WHERE reference = $1', [
        reference,
      ])
    ).length;

  it(`reject mode: ${DUPLICATES} at once run the handler once; the others get 409 with Retry-After`, async () => {
    const { all, settled } = burst(
      target,
      '/concurrency/reject',
      'reject-1',
      'ref-reject',
      DUPLICATES,
    );
    await gate.barrier.reached(1);
    // Every duplicate is answered while the first is held inside the handler.
    await settled(DUPLICATES - 1);
    gate.barrier.open();
    const answers = await all;

    const executed = answers.filter((a) => a.status === 201);
    const conflicts = answers.filter((a) => a.status === 409);
    expect(executed).toHaveLength(1);
    expect(executed[0].replayed).toBe(false);
    expect(conflicts).toHaveLength(DUPLICATES - 1);
    for (const conflict of conflicts) {
      expect(conflict.retryAfter).toBe('1');
      expect(conflict.contentType).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(conflict.body)).toEqual({
        type: 'urn:idempotency:request-in-progress',
        title: 'Request in progress',
        status: 409,
        detail: expect.any(String),
        key: 'reject-1',
      });
    }
    expect(gate.runs).toBe(1);
    expect(await rows('ref-reject')).toBe(1);

    const retry = await answer(
      send(target, '/concurrency/reject', {
        key: 'reject-1',
        body: { reference: 'ref-reject' },
      }),
    );
    expect(retry.status).toBe(201);
    expect(retry.replayed).toBe(true);
    expect(retry.body).toBe(executed[0].body);
  });

  it(`wait mode: ${DUPLICATES} at once run the handler once; the others wait and get the replay`, async () => {
    const { all } = burst(
      target,
      '/concurrency/wait',
      'wait-1',
      'ref-wait',
      DUPLICATES,
    );
    await gate.barrier.reached(1);
    // A duplicate marked the claim as waited for before the first may finish.
    await untilWaiting(target.db, 'wait-1');
    gate.barrier.open();
    const answers = await all;

    expect(answers.map((a) => a.status)).toEqual(Array(DUPLICATES).fill(201));
    expect(answers.filter((a) => !a.replayed)).toHaveLength(1);
    expect(new Set(answers.map((a) => a.body)).size).toBe(1);
    expect(gate.runs).toBe(1);
    expect(await rows('ref-wait')).toBe(1);
  });

  it('wait mode: when the first run fails, a waiter runs the handler, with the session lock_timeout', async () => {
    const first = answer(
      send(target, '/concurrency/takeover', { key: 'takeover-1' }),
    );
    await gate.barrier.reached(1);
    const waiter = answer(
      send(target, '/concurrency/takeover', { key: 'takeover-1' }),
    );
    await untilWaiting(target.db, 'takeover-1');
    gate.barrier.open();
    expect((await first).status).toBe(503);
    const took = await waiter;
    expect(took.status).toBe(201);
    expect(took.replayed).toBe(false);
    expect(JSON.parse(took.body)).toEqual({ run: 2, lockTimeout: '0' });
  });

  it('wait mode: a duplicate that waits longer than waitTimeout gets 409', async () => {
    const first = answer(
      send(target, '/concurrency/wait-short', {
        key: 'short-1',
        body: { reference: 'ref-short' },
      }),
    );
    await gate.barrier.reached(1);
    const waited = await answer(
      send(target, '/concurrency/wait-short', {
        key: 'short-1',
        body: { reference: 'ref-short' },
      }),
    );
    expect(waited.status).toBe(409);
    expect(waited.retryAfter).toBe('2');
    gate.barrier.open();
    expect((await first).status).toBe(201);
    const later = await answer(
      send(target, '/concurrency/wait-short', {
        key: 'short-1',
        body: { reference: 'ref-short' },
      }),
    );
    expect(later.status).toBe(201);
    expect(later.replayed).toBe(true);
    expect(gate.runs).toBe(1);
    expect(await rows('ref-short')).toBe(1);
  });
});
