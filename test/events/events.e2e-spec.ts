import {
  IdempotencyCollector,
  type IdempotencyEvent,
} from '../../src/index.js';
import { EventsTestModule, Runs } from './events.module.js';
import { Barrier } from '../utils/barrier.js';
import { CapturedLogger } from '../telemetry/captured-logger.js';
import { takeOver } from '../utils/claims.js';
import {
  send,
  PLATFORMS,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

describe.each(PLATFORMS)('events for metrics (%s)', (platform) => {
  let target: TestApp;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [EventsTestModule],
      idempotency: { gc: false, onEvent: (event) => events.push(event) },
    });
  });
  afterAll(() => target.close());
  beforeEach(() => {
    events.length = 0;
  });

  const types = () => events.map((event) => event.type);

  it('reports an execution, then a replay, with the request and its status', async () => {
    await send(target, '/keys/default', { key: 'ev-1', body: { a: 1 } });
    await send(target, '/keys/default', { key: 'ev-1', body: { a: 1 } });
    expect(types()).toEqual(['executed', 'replayed']);
    expect(events[0]).toMatchObject({
      scope: 'global',
      key: 'ev-1',
      method: 'POST',
      path: '/keys/default',
      status: 201,
      durationMs: expect.any(Number),
    });
    expect(events[1]).toMatchObject({ key: 'ev-1', status: 201 });
  });

  it('reports the execution of a request without a key with the status it was answered', async () => {
    const answer = await send(target, '/keys/optional', { body: { a: 1 } });
    expect(answer.status).toBe(201);
    expect(events).toEqual([
      {
        type: 'executed',
        scope: 'global',
        key: undefined,
        method: 'POST',
        path: '/keys/optional',
        status: 201,
        durationMs: expect.any(Number),
      },
    ]);
  });

  it('reports conflicts and mismatches', async () => {
    const runs = target.app.get(Runs);
    runs.barrier = new Barrier();
    const first = send(target, '/fingerprint/held', {
      key: 'ev-2',
      body: { reference: 'ev-2' },
    });
    await runs.barrier.reached(1);
    await send(target, '/fingerprint/held', {
      key: 'ev-2',
      body: { reference: 'ev-2' },
    });
    await send(target, '/fingerprint/held', {
      key: 'ev-2',
      body: { reference: 'other' },
    });
    runs.barrier.open();
    await first;
    expect(types()).toEqual(['conflict', 'mismatch', 'executed']);
    expect(events[0]).toMatchObject({ status: 409, key: 'ev-2' });
    expect(events[1]).toMatchObject({ status: 422, key: 'ev-2' });
  });

  it('reports stored errors and duplicates of unreplayable responses', async () => {
    await send(target, '/errors/declined', {
      key: 'ev-3',
      body: { reference: 'ev-3' },
    });
    await send(target, '/responses/stream', {
      key: 'ev-4',
      body: { reference: 'ev-4' },
    });
    await send(target, '/responses/stream', {
      key: 'ev-4',
      body: { reference: 'ev-4' },
    });
    expect(types()).toEqual(['stored-error', 'executed', 'not-replayable']);
    // The status the duplicate got: the original one, its body omitted.
    expect(events[2]).toMatchObject({ key: 'ev-4', status: 201 });
  });

  it('reports a request abandoned at its deadline, and one whose claim was taken over, each answered 503 (the status of the event) with nothing committed', async () => {
    const runs = target.app.get(Runs);
    runs.barrier = new Barrier();
    const late = await send(target, '/deadline', {
      key: 'ev-5',
      body: { reference: 'ev-5' },
    });
    expect(late.status).toBe(503);
    expect(events).toEqual([
      expect.objectContaining({
        type: 'timeout',
        key: 'ev-5',
        path: '/deadline',
        status: 503,
        error: expect.any(Error),
      }),
    ]);

    events.length = 0;
    const lost = send(target, '/fingerprint/held', {
      key: 'ev-6',
      body: { reference: 'ev-6' },
    });
    await runs.barrier.reached(2);
    await takeOver(target.db.url, 'ev-6');
    runs.barrier.open();
    expect((await lost).status).toBe(503);
    expect(events).toEqual([
      expect.objectContaining({
        type: 'lease-lost',
        key: 'ev-6',
        path: '/fingerprint/held',
        status: 503,
        error: expect.any(Error),
      }),
    ]);
    expect(
      await target.db.query(
        `SELECT reference FROM orders WHERE reference IN ('ev-5', 'ev-6')`,
      ),
    ).toEqual([]);
  });

  it('reports a response whose redact hook threw as failed, with its error, answered 503 with nothing committed', async () => {
    const answer = await send(target, '/responses/unredactable', {
      key: 'ev-7',
      body: { reference: 'ev-7' },
    });
    expect(answer.status).toBe(503);
    expect(events).toEqual([
      expect.objectContaining({
        type: 'failed',
        key: 'ev-7',
        path: '/responses/unredactable',
        status: 503,
        error: new Error('the redact hook failed'),
      }),
    ]);
    expect(
      await target.db.query(
        `SELECT reference FROM orders WHERE reference = 'ev-7'`,
      ),
    ).toEqual([]);
    expect(
      await target.db.query(
        `SELECT key FROM idempotency_records WHERE key = 'ev-7'`,
      ),
    ).toEqual([]);
  });

  it('reports garbage collections with the rows removed', async () => {
    await target.db.query(
      `UPDATE idempotency_records SET expires_at = now() - interval '1 minute'`,
    );
    const removed = await target.app.get(IdempotencyCollector).collect();
    expect(removed).toBeGreaterThan(0);
    expect(events).toEqual([
      { type: 'gc', removed, durationMs: expect.any(Number) },
    ]);
  });
});

describe.each(PLATFORMS)('a failing onEvent listener (%s)', (platform) => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it.each([
    [
      'throws',
      (): void => {
        throw new Error('metrics backend down');
      },
    ],
    [
      'returns a promise that rejects (an async listener)',
      (): Promise<void> => Promise.reject(new Error('metrics backend down')),
    ],
  ])(
    'is logged as a warning when it %s, and the request is answered all the same',
    async (_, onEvent) => {
      const logger = new CapturedLogger();
      target = await startTestApp({
        platform,
        imports: [EventsTestModule],
        idempotency: { gc: false, onEvent },
        configure: (app) => app.useLogger(logger),
      });
      logger.clear();
      const first = await send(target, '/keys/default', {
        key: 'ev-listener',
        body: { a: 1 },
      });
      expect(first.status).toBe(201);
      const replay = await send(target, '/keys/default', {
        key: 'ev-listener',
        body: { a: 1 },
      });
      expect([
        replay.status,
        replay.headers.get('idempotent-replayed'),
      ]).toEqual([201, 'true']);
      expect(
        logger.of('Idempotency').filter((line) => !line.startsWith('debug ')),
      ).toEqual([
        'warn onEvent threw: metrics backend down',
        'warn onEvent threw: metrics backend down',
      ]);
    },
  );
});
