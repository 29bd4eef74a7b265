import { createHash } from 'node:crypto';
import { Barrier, untilWaiting } from '../utils/barrier.js';
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

  it('tells a body with a `__proto__` field from one without on a route that excludes fields (Fastify refuses the first itself)', async () => {
    const withProto = await send(target, '/fingerprint/exclude', {
      key: 'exc-proto',
      body: JSON.parse('{"amount":1,"sentAt":1,"__proto__":{"role":"admin"}}'),
    });
    expect(withProto.status).toBe(platform === 'fastify' ? 400 : 201);
    const without = await send(target, '/fingerprint/exclude', {
      key: 'exc-proto',
      body: { amount: 1, sentAt: 1 },
    });
    expect(without.status).toBe(platform === 'fastify' ? 201 : 422);
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
    // The duplicate marked the claim: the owner wakes it on completion.
    await untilWaiting(target.db, 'wait-1');
    runs.barrier.open();
    expect((await first).status).toBe(201);
    const replayed = await same;
    expect(replayed.status).toBe(201);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.counts['fingerprint/held-wait']).toBe(1);
  });

  it('refuses with 422 the bodies a JSON writer would print alike (1e309, -1e309, null; -0 and 0), and replays only the same one', async () => {
    /** A raw JSON text under one key, as the client wrote it. */
    const raw = (key: string, text: string) =>
      fetch(`${target.url}/keys/default`, {
        method: 'POST',
        headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
        body: text,
      });
    const runsOf = () => runs.counts['keys/default'] ?? 0;
    const before = runsOf();
    expect((await raw('inf-1', '{"v":1e309}')).status).toBe(201);
    for (const other of ['{"v":-1e309}', '{"v":null}', '{"v":1e308}']) {
      const refused = await raw('inf-1', other);
      expect([other, refused.status]).toEqual([other, 422]);
    }
    const same = await raw('inf-1', '{ "v" : 2e309 }');
    expect(same.status).toBe(201);
    expect(same.headers.get('idempotent-replayed')).toBe('true');

    expect((await raw('zero-1', '{"v":-0}')).status).toBe(201);
    expect((await raw('zero-1', '{"v":0}')).status).toBe(422);
    expect((await raw('zero-1', '{"v":-0.0}')).status).toBe(201);
    expect(runsOf() - before).toBe(2);
  });

  /** How many refunds of account `id` were written. */
  const refunds = async (id: string) =>
    (
      await target.db.query(`SELECT 1 FROM orders WHERE reference = $1`, [
        `refund-${id}`,
      ])
    ).length;

  // Each test counts the runs of the accounts routes from zero.
  beforeEach(() => {
    delete runs.counts['accounts/refund'];
    delete runs.counts['accounts/search'];
  });

  describe('path parameters and query', () => {
    it('refuses the same key on another path parameter with 422 once the first has finished, and never runs it', async () => {
      runs.barrier.open();
      const a = await send(target, '/accounts/A/refund', {
        key: 'param-1',
        body: { reason: 'dup' },
      });
      expect(a.status).toBe(201);
      expect(await a.json()).toEqual({ refunded: 'A', run: 1, query: {} });
      const b = await send(target, '/accounts/B/refund', {
        key: 'param-1',
        body: { reason: 'dup' },
      });
      expect(b.status).toBe(422);
      expect(b.headers.get('content-type')).toMatch(
        /^application\/problem\+json/,
      );
      expect(((await b.json()) as { type: string }).type).toBe(
        'urn:idempotency:key-reused',
      );
      const again = await send(target, '/accounts/A/refund', {
        key: 'param-1',
        body: { reason: 'dup' },
      });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.json()).toEqual({ refunded: 'A', run: 1, query: {} });
      expect(runs.counts['accounts/refund']).toBe(1);
      expect([await refunds('A'), await refunds('B')]).toEqual([1, 0]);
    });

    it('refuses another path parameter with 422 while the first is still running; the same one gets 409', async () => {
      const first = send(target, '/accounts/C/refund', { key: 'param-2' });
      await runs.barrier.reached(1);
      const other = await send(target, '/accounts/D/refund', {
        key: 'param-2',
      });
      expect(other.status).toBe(422);
      const same = await send(target, '/accounts/C/refund', {
        key: 'param-2',
      });
      expect(same.status).toBe(409);
      runs.barrier.open();
      expect((await first).status).toBe(201);
      expect([await refunds('C'), await refunds('D')]).toEqual([1, 0]);
    });

    it('refuses another query with 422, finished or running', async () => {
      runs.barrier.open();
      const five = await send(target, '/accounts/E/refund?amount=5', {
        key: 'query-1',
      });
      expect(await five.json()).toEqual({
        refunded: 'E',
        run: 1,
        query: { amount: '5' },
      });
      const six = await send(target, '/accounts/E/refund?amount=6', {
        key: 'query-1',
      });
      expect(six.status).toBe(422);
      const none = await send(target, '/accounts/E/refund', {
        key: 'query-1',
      });
      expect(none.status).toBe(422);
      expect(runs.counts['accounts/refund']).toBe(1);

      runs.barrier = new Barrier();
      const running = send(target, '/accounts/F/refund?amount=5', {
        key: 'query-2',
      });
      await runs.barrier.reached(1);
      const otherAmount = await send(target, '/accounts/F/refund?amount=6', {
        key: 'query-2',
      });
      expect(otherAmount.status).toBe(422);
      runs.barrier.open();
      expect((await running).status).toBe(201);
      expect(await refunds('F')).toBe(1);
    });

    it('replays the same query with its parameters in another order, but not a repeated parameter with its values reordered', async () => {
      runs.barrier.open();
      const first = await send(
        target,
        '/accounts/G/refund?amount=5&currency=EUR&tag=a&tag=b',
        { key: 'query-3' },
      );
      expect(first.status).toBe(201);
      const reordered = await send(
        target,
        '/accounts/G/refund?tag=a&currency=EUR&tag=b&amount=5',
        { key: 'query-3' },
      );
      expect(reordered.status).toBe(201);
      expect(reordered.headers.get('idempotent-replayed')).toBe('true');
      expect(await reordered.text()).toBe(await first.text());
      const swapped = await send(
        target,
        '/accounts/G/refund?amount=5&currency=EUR&tag=b&tag=a',
        { key: 'query-3' },
      );
      expect(swapped.status).toBe(422);
      expect(runs.counts['accounts/refund']).toBe(1);
    });

    /**
     * Sends `first` under `key`, then `same` (replayed: the first's bytes),
     * then `other` (422): `route` ran once.
     */
    const replaysOnly = async (
      key: string,
      route: string,
      urls: { first: string; same: string; other: string },
    ) => {
      const first = await send(target, urls.first, { key });
      expect(first.status).toBe(201);
      const same = await send(target, urls.same, { key });
      expect(same.headers.get('idempotent-replayed')).toBe('true');
      expect(await same.text()).toBe(await first.text());
      const other = await send(target, urls.other, { key });
      expect(other.status).toBe(422);
      expect(runs.counts[route]).toBe(1);
    };

    it('refuses with 422 a query value whose escapes are not UTF-8 under the key of another one, which the handler may read apart (Fastify does)', async () => {
      runs.barrier.open();
      await replaysOnly('query-undecoded', 'accounts/refund', {
        first: '/accounts/I/refund?to=acct%FF1',
        same: '/accounts/I/refund?to=acct%FF1',
        other: '/accounts/I/refund?to=acct%FE1',
      });
    });

    it('refuses with 422 a query value with a stray `%` beside an escape under the key of its decoded spelling, which Fastify and qs read apart', async () => {
      runs.barrier.open();
      await replaysOnly('query-stray', 'accounts/refund', {
        first: '/accounts/J/refund?note=100%%20off',
        same: '/accounts/J/refund?note=100%%20off',
        other: '/accounts/J/refund?note=100%25%20off',
      });
    });

    it('ignores a query parameter named by `exclude` (a cache buster), and no other', async () => {
      await replaysOnly('buster-1', 'accounts/search', {
        first: '/accounts/H/search?q=x&_=1700000001',
        same: '/accounts/H/search?_=1700000002&q=x',
        other: '/accounts/H/search?q=y&_=1700000001',
      });
    });
  });

  describe('records written by 0.1.0', () => {
    // 0.1.0 fingerprinted the method, the route template and the canonical
    // body only, as a bare sha256 hex digest: computed here independently.
    const legacy = (route: string, canonicalBody: string) =>
      createHash('sha256')
        .update(`POST\n${route}\nj:${canonicalBody}`)
        .digest('hex');
    const insertLegacy = (key: string, fingerprint: string) =>
      target.db.query(
        `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
           status, response_status, response_headers, response_body,
           completed_at, expires_at)
         VALUES ('global', $1, $2, 'POST', '/accounts/:id/refund', 'completed',
           201, '{"content-type":"application/json; charset=utf-8"}',
           convert_to('{"refunded":"legacy"}', 'UTF8'), now(),
           now() + interval '1 hour')`,
        [key, fingerprint],
      );

    it('keep replaying for an identical request, and refuse another body with 422', async () => {
      runs.barrier.open();
      await insertLegacy(
        'legacy-1',
        legacy('/accounts/:id/refund', '{"amount":5,"currency":"EUR"}'),
      );
      const identical = await send(target, '/accounts/L/refund', {
        key: 'legacy-1',
        body: { currency: 'EUR', amount: 5 },
      });
      expect(identical.status).toBe(201);
      expect(identical.headers.get('idempotent-replayed')).toBe('true');
      expect(await identical.text()).toBe('{"refunded":"legacy"}');
      const otherBody = await send(target, '/accounts/L/refund', {
        key: 'legacy-1',
        body: { currency: 'EUR', amount: 6 },
      });
      expect(otherBody.status).toBe(422);
      expect(runs.counts['accounts/refund'] ?? 0).toBe(0);
      expect(await refunds('L')).toBe(0);
    });

    it('are not matched by a fingerprint of the new formula that merely looks different', async () => {
      // A v2 record never falls back to the old formula.
      await target.db.query(
        `INSERT INTO idempotency_records (scope, key, fingerprint, method, path,
           status, response_status, response_headers, response_body,
           completed_at, expires_at)
         VALUES ('global', 'legacy-2', 'v2:' || $1, 'POST', '/accounts/:id/refund',
           'completed', 201, '{}', convert_to('{}', 'UTF8'), now(),
           now() + interval '1 hour')`,
        [legacy('/accounts/:id/refund', '{"amount":5}')],
      );
      const request = await send(target, '/accounts/M/refund', {
        key: 'legacy-2',
        body: { amount: 5 },
      });
      expect(request.status).toBe(422);
    });
  });
});
