import type { IdempotencyEvent } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Hang, HungHandlerTestModule } from './hung-handler.module.js';

/** What the module answers a request abandoned at its deadline. */
const UNAVAILABLE = {
  type: 'urn:idempotency:unavailable',
  title: 'Request not completed',
  status: 503,
  detail:
    'The request could not be completed. Retry it with the same idempotency key: it takes effect exactly once.',
};

describe.each(PLATFORMS)(
  'a hung handler past its deadline (%s)',
  (platform) => {
    let target: TestApp;
    const events: IdempotencyEvent[] = [];

    beforeAll(async () => {
      target = await startTestApp({
        platform,
        imports: [HungHandlerTestModule],
        // A lease much longer than the deadline: only the abandonment frees the key.
        idempotency: {
          lease: '1m',
          gc: false,
          onEvent: (event) => events.push(event),
        },
      });
    });
    afterAll(async () => {
      target?.app.get(Hang).barrier.open();
      await target?.close();
    });

    const orders = (reference: string) =>
      target.db.query<{ id: number; source: string }>(
        'SELECT id, source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      );

    it.each([
      ['before-write', 'before its first statement'],
      ['after-write', 'inside its transaction, after a write'],
    ])(
      'hung %s (%s): the client gets 503 at the deadline, a retry executes at once, and the late writes never commit',
      async (route) => {
        const hang = target.app.get(Hang);
        const late = hang.reset();
        const key = `hung-${route}`;
        const reference = `ref-${route}`;
        const body = { reference };

        const first = await send(target, `/hung/${route}`, { key, body });
        // The run is still hung: its client got its answer at the deadline.
        await hang.barrier.reached(1);
        expect({
          status: first.status,
          contentType: first.headers.get('content-type'),
          retryAfter: first.headers.get('retry-after'),
          body: (await first.json()) as unknown,
        }).toEqual({
          status: 503,
          contentType: expect.stringMatching(/^application\/problem\+json/),
          retryAfter: '1',
          body: UNAVAILABLE,
        });
        // Its transaction was rolled back: no connection of the pool is left
        // inside it (were one, the next statement on it would run in it).
        expect(
          await target.db.query(
            `SELECT state, query FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND state LIKE 'idle in transaction%'`,
          ),
        ).toEqual([]);
        // The claim was given up at once (released, not left to expire).
        expect(
          await target.db.query(
            'SELECT status FROM idempotency_records WHERE key = $1',
            [key],
          ),
        ).toEqual([]);

        const retry = await send(target, `/hung/${route}`, { key, body });
        expect(retry.status).toBe(201);
        const executed = (await retry.json()) as { id: number; run: number };
        expect(executed).toEqual({ id: expect.any(Number), run: 2 });

        hang.barrier.open();
        const outcome = await late;
        // The late run's statement fails: it has no claim, and no transaction.
        expect(outcome).toEqual({ error: expect.anything() });
        expect(await orders(reference)).toEqual([
          { id: executed.id, source: 'run-2' },
        ]);
        expect(
          await target.db.query(
            `SELECT status, response_status FROM idempotency_records WHERE key = $1`,
            [key],
          ),
        ).toEqual([{ status: 'completed', response_status: 201 }]);
        const replay = await send(target, `/hung/${route}`, { key, body });
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(await replay.json()).toEqual(executed);
        expect(
          events
            .filter((event) => event.key === key)
            .map((event) => event.type),
        ).toEqual(['timeout', 'executed', 'replayed']);
      },
    );
  },
);
