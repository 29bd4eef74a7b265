import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { ReplayRuns, ReplayTestModule } from './replay.module.js';

describe.each(PLATFORMS)('replay of a completed request (%s)', (platform) => {
  let target: TestApp;
  let runs: ReplayRuns;

  beforeAll(async () => {
    target = await startTestApp({ imports: [ReplayTestModule], platform });
    runs = target.app.get(ReplayRuns);
  });
  afterAll(() => target.close());

  it('replays status, body bytes, content type and @Header() headers, without running the handler', async () => {
    const payload = { amount: 1250, currency: 'EUR', tags: ['a', 'b'] };
    const first = await send(target, '/replay/json', {
      key: 'json-1',
      body: payload,
    });
    const firstBody = Buffer.from(await first.arrayBuffer());
    expect(first.status).toBe(201);
    expect(first.headers.get('set-cookie')).toContain('session=s1');
    expect(first.headers.get('idempotent-replayed')).toBeNull();

    const second = await send(target, '/replay/json', {
      key: 'json-1',
      body: payload,
    });
    const secondBody = Buffer.from(await second.arrayBuffer());
    expect(second.status).toBe(201);
    expect(secondBody.equals(firstBody)).toBe(true);
    expect(second.headers.get('content-type')).toBe(
      first.headers.get('content-type'),
    );
    expect(second.headers.get('content-type')).toBe(
      'application/json; charset=utf-8',
    );
    expect(second.headers.get('x-custom')).toBe('yes');
    expect(second.headers.get('cache-control')).toBe('no-store');
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('set-cookie')).toBeNull();
    expect(second.headers.get('date')).not.toBeNull();
    expect(runs.json).toBe(1);

    const [stored] = await target.db.query<{
      response_headers: Record<string, string>;
    }>(
      `SELECT response_headers FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'json-1'`,
    );
    expect(Object.keys(stored.response_headers)).not.toEqual(
      expect.arrayContaining(['set-cookie']),
    );
    expect(stored.response_headers).not.toHaveProperty('date');
    expect(stored.response_headers).not.toHaveProperty('connection');
  });

  it('treats a body with the same fields in another order as the same request', async () => {
    await send(target, '/replay/other', {
      key: 'order-1',
      body: { a: 1, b: { c: 2, d: 3 } },
    });
    const second = await send(target, '/replay/other', {
      key: 'order-1',
      body: { b: { d: 3, c: 2 }, a: 1 },
    });
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.json()).toEqual({ a: 1, b: { c: 2, d: 3 } });
  });

  it('replays the status set with @HttpCode and a text body', async () => {
    const first = await send(target, '/replay/text', { key: 'text-1' });
    expect(first.status).toBe(202);
    expect(await first.text()).toBe('queued #1');
    const second = await send(target, '/replay/text', { key: 'text-1' });
    expect(second.status).toBe(202);
    expect(await second.text()).toBe('queued #1');
    expect(second.headers.get('content-type')).toBe(
      first.headers.get('content-type'),
    );
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.text).toBe(1);
  });

  it('replays an empty 204', async () => {
    const first = await send(target, '/replay/empty', { key: 'empty-1' });
    expect(first.status).toBe(204);
    const second = await send(target, '/replay/empty', { key: 'empty-1' });
    expect(second.status).toBe(204);
    expect(await second.text()).toBe('');
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.empty).toBe(1);
  });

  it('replays a 204 without a Content-Length, like the original', async () => {
    const first = await send(target, '/replay/empty', { key: 'empty-2' });
    expect(first.status).toBe(204);
    expect(first.headers.get('content-length')).toBeNull();
    const second = await send(target, '/replay/empty', { key: 'empty-2' });
    expect(second.status).toBe(204);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('content-length')).toBeNull();
  });

  it('refuses the same key with another payload (422) and never returns the other response', async () => {
    const before = runs.other;
    await send(target, '/replay/other', {
      key: 'reuse-1',
      body: { amount: 1 },
    });
    const reused = await send(target, '/replay/other', {
      key: 'reuse-1',
      body: { amount: 2 },
    });
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(await reused.json()).toEqual({
      type: 'urn:idempotency:key-reused',
      title: 'Idempotency key reused',
      status: 422,
      detail: expect.any(String),
      key: 'reuse-1',
    });
    expect(runs.other).toBe(before + 1);
  });

  it('refuses the same key on another route (422)', async () => {
    await send(target, '/replay/other', { key: 'route-1', body: {} });
    const elsewhere = await send(target, '/replay/text', { key: 'route-1' });
    expect(elsewhere.status).toBe(422);
  });

  it('refuses a request without a key (400), runs nothing and stores nothing', async () => {
    const before = runs.other;
    const response = await send(target, '/replay/other', { body: { a: 1 } });
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(((await response.json()) as { type: string }).type).toBe(
      'urn:idempotency:missing-key',
    );
    expect(runs.other).toBe(before);
  });

  it('refuses a malformed key (400)', async () => {
    const before = runs.other;
    for (const key of ['has space', 'x'.repeat(256), 'tab\there']) {
      const response = await send(target, '/replay/other', {
        key,
        body: { a: 1 },
      });
      expect(response.status).toBe(400);
    }
    expect(runs.other).toBe(before);
    const keys = await target.db.query<{ key: string }>(
      `SELECT key FROM ${IDEMPOTENCY_TABLE_NAME}`,
    );
    expect(keys.map((k) => k.key)).not.toEqual(
      expect.arrayContaining(['has space']),
    );
  });

  it('treats an expired record as absent: the key executes again and its record is replaced', async () => {
    const first = await send(target, '/replay/text', { key: 'expired-1' });
    expect(await first.text()).toMatch(/^queued #\d+$/);
    const runsBefore = runs.text;
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET expires_at = now() - interval '1 second' WHERE key = 'expired-1'`,
    );
    const again = await send(target, '/replay/text', { key: 'expired-1' });
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(await again.text()).toBe(`queued #${runsBefore + 1}`);
    const rows = await target.db.query<{ body: string; live: boolean }>(
      `SELECT convert_from(response_body, 'UTF8') AS body, expires_at > now() AS live
       FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'expired-1'`,
    );
    expect(rows).toEqual([{ body: `queued #${runsBefore + 1}`, live: true }]);
  });
});
