import { randomUUID } from 'node:crypto';
import {
  IdempotencyConfigurationError,
  MemoryIdempotencyStore,
} from '../../src/index.js';
import type { ClaimRequest } from '../../src/interfaces/idempotency-store.interface.js';
import { describeStoreConformance } from './conformance.js';

describeStoreConformance('memory', () =>
  Promise.resolve({
    store: new MemoryIdempotencyStore(),
    close: () => Promise.resolve(),
  }),
);

describe('the in-memory store', () => {
  const attempt = (key: string): ClaimRequest => ({
    scope: 'memory',
    key,
    owner: randomUUID(),
    fingerprint: 'fp',
    method: 'POST',
    path: '/memory',
    leaseMs: 60_000,
    ttlMs: 3_600_000,
    wait: false,
  });

  describe('in production mode', () => {
    const env = process.env.NODE_ENV;
    beforeEach(() => {
      process.env.NODE_ENV = 'production';
    });
    afterEach(() => {
      process.env.NODE_ENV = env;
    });

    it('refuses to start, saying how to choose', () => {
      expect(() => new MemoryIdempotencyStore()).toThrow(
        IdempotencyConfigurationError,
      );
      expect(() => new MemoryIdempotencyStore()).toThrow(
        /NODE_ENV is "production"[\s\S]*allowInProduction: true/,
      );
    });

    it('starts when told to', async () => {
      const store = new MemoryIdempotencyStore({ allowInProduction: true });
      expect(await store.claim(attempt('prod'))).toMatchObject({
        state: 'claimed',
      });
    });
  });

  it('completes outside of any transaction, and wakes the watchers of every module sharing it', async () => {
    const store = new MemoryIdempotencyStore();
    expect(store.completesInTransaction).toBe(false);
    expect(store.watching).toBe(true);
    const woken: Array<[string?, string?]> = [];
    store.watch((scope, key) => woken.push([scope, key]));
    store.watch((scope, key) => woken.push([scope, key]));
    await store.notify([{ scope: 's', key: 'k\n{x}', owner: randomUUID() }]);
    expect(woken).toEqual([
      ['s', 'k\n{x}'],
      ['s', 'k\n{x}'],
    ]);
  });

  it('keeps copies: what the caller does with a response or a step result later changes nothing stored', async () => {
    const store = new MemoryIdempotencyStore();
    const claim = attempt('copies');
    await store.claim(claim);
    const step = { id: 'ch_1' };
    await store.saveStep(claim, 'charge', step, 60_000);
    step.id = 'changed';
    expect(await store.readStep(claim, 'charge')).toEqual({
      result: { id: 'ch_1' },
    });
    const body = Buffer.from('{"ok":true}');
    await store.complete(
      claim,
      {
        status: 'completed',
        response: { status: 201, headers: { 'x-a': ['1'] }, body },
        ttlMs: 60_000,
      },
      undefined,
    );
    body.fill(0);
    const replay = await store.claim(attempt('copies'));
    expect(replay).toMatchObject({
      state: 'finished',
      record: { response: { body: Buffer.from('{"ok":true}') } },
    });
    (
      replay as { record: { response: { body: Buffer } } }
    ).record.response.body.fill(0);
    expect(await store.claim(attempt('copies'))).toMatchObject({
      state: 'finished',
      record: { response: { body: Buffer.from('{"ok":true}') } },
    });
  });

  it('refuses a step result JSON cannot hold, and writes nothing', async () => {
    const store = new MemoryIdempotencyStore();
    const claim = attempt('bigint');
    await store.claim(claim);
    await expect(
      store.saveStep(claim, 'charge', { amount: 1n }, 60_000),
    ).rejects.toThrow(TypeError);
    expect(await store.readStep(claim, 'charge')).toBeUndefined();
  });

  it('forgets everything on clear()', async () => {
    const store = new MemoryIdempotencyStore();
    await store.claim(attempt('a'));
    expect(store.size).toBe(1);
    store.clear();
    expect(store.size).toBe(0);
    expect(await store.claim(attempt('a'))).toMatchObject({ state: 'claimed' });
  });
});
