import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { send, PLATFORMS, type TestApp } from '../utils/test-app.js';
import { useContractApp } from './contract-app.js';
import type { Runs } from './contract.module.js';

describe.each(PLATFORMS)('error policy (%s)', (platform) => {
  let target: TestApp;
  let runs: Runs;

  useContractApp(platform, (app) => ({ target, runs } = app));

  const orders = async (reference: string) =>
    (
      await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
        reference,
      ])
    ).length;
  const record = async (key: string) =>
    target.db.query<{ status: string; response_status: number }>(
      `SELECT status, response_status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );

  it('stores a 4xx with storeErrors: true and replays it; the handler writes still roll back', async () => {
    const first = await send(target, '/errors/declined', {
      key: 'dec-1',
      body: { reference: 'dec' },
    });
    expect(first.status).toBe(400);
    const firstBody = await first.text();
    expect(JSON.parse(firstBody)).toEqual({
      statusCode: 400,
      message: 'declined #1',
      error: 'Bad Request',
    });
    expect(await record('dec-1')).toEqual([
      { status: 'failed', response_status: 400 },
    ]);

    const second = await send(target, '/errors/declined', {
      key: 'dec-1',
      body: { reference: 'dec' },
    });
    expect(second.status).toBe(400);
    expect(await second.text()).toBe(firstBody);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('content-type')).toBe(
      first.headers.get('content-type'),
    );
    expect(runs.counts['errors/declined']).toBe(1);
    expect(await orders('dec')).toBe(0);

    const reused = await send(target, '/errors/declined', {
      key: 'dec-1',
      body: { reference: 'other' },
    });
    expect(reused.status).toBe(422);
  });

  it('never stores a 5xx under storeErrors: true: a retry runs again', async () => {
    const first = await send(target, '/errors/crashed', {
      key: 'crash-1',
      body: { reference: 'crash' },
    });
    expect(first.status).toBe(500);
    expect(await record('crash-1')).toEqual([]);
    const second = await send(target, '/errors/crashed', {
      key: 'crash-1',
      body: { reference: 'crash' },
    });
    expect(second.status).toBe(500);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(runs.counts['errors/crashed']).toBe(2);
    expect(await orders('crash')).toBe(0);
  });

  it.each([
    [408, 'true', 'retry-later'],
    [425, 'true', 'retry-later'],
    [429, 'true', 'retry-later'],
    [408, 'a policy storing every error', 'retry-later-any-policy'],
    [425, 'a policy storing every error', 'retry-later-any-policy'],
    [429, 'a policy storing every error', 'retry-later-any-policy'],
  ] as const)(
    'never stores a %i (come back later) under storeErrors: %s: the key is released and the retry runs the handler',
    async (status, _policy, route) => {
      const path = `/errors/${route}/${status}`;
      const key = `${route}-${status}`;
      const reference = `${route}-${status}`;
      const first = await send(target, path, { key, body: { reference } });
      expect(first.status).toBe(status);
      expect(((await first.json()) as { message: string }).message).toBe(
        'come back later #1',
      );
      expect(await record(key)).toEqual([]);

      const retry = await send(target, path, { key, body: { reference } });
      expect(retry.status).toBe(status);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(((await retry.json()) as { message: string }).message).toBe(
        'come back later #2',
      );
      expect(runs.counts[`errors/${route}/${status}`]).toBe(2);
      expect(await record(key)).toEqual([]);
      expect(await orders(reference)).toBe(0);
    },
  );

  it('stores what a predicate chooses, a 503 included', async () => {
    const first = await send(target, '/errors/unavailable', {
      key: 'down-1',
      body: { reference: 'down' },
    });
    expect(first.status).toBe(503);
    const second = await send(target, '/errors/unavailable', {
      key: 'down-1',
      body: { reference: 'down' },
    });
    expect(second.status).toBe(503);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(((await second.json()) as { message: string }).message).toBe(
      'gateway down #1',
    );
    expect(runs.counts['errors/unavailable']).toBe(1);
  });

  it('stores the response the client got, as exception filters shaped it', async () => {
    const first = await send(target, '/errors/filtered', {
      key: 'filt-1',
      body: { reference: 'filt' },
    });
    expect(first.status).toBe(400);
    expect(await first.json()).toEqual({
      error: { code: 'E400', message: 'filtered #1' },
    });
    const second = await send(target, '/errors/filtered', {
      key: 'filt-1',
      body: { reference: 'filt' },
    });
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await second.json()).toEqual({
      error: { code: 'E400', message: 'filtered #1' },
    });
    expect(runs.counts['errors/filtered']).toBe(1);
  });
});
