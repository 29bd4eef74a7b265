import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import type { WebhookPresetName } from '../../src/index.js';
import {
  completeStatements,
  COMPLETE_ALONE,
} from '../../src/stores/postgres/postgres-statements.js';
import { answer, type Answer } from '../utils/problems.js';
import {
  StatementFaults,
  typeormPool,
  type FaultTiming,
  type Statement,
} from '../utils/statement-faults.js';
import { PLATFORMS, startTestApp, type TestApp } from '../utils/test-app.js';
import {
  eventId,
  payloadOf,
  SECRETS,
  signedDelivery,
} from './signed-deliveries.js';
import { ROUTES, WebhooksTestModule } from './webhooks.module.js';

/** The module's completion, on the test database's `public` tables. */
const { complete: COMPLETE } = completeStatements('public');

/** Where a delivery's connection is lost: the statement, by the event id. */
type At = (id: string) => (statement: Statement) => boolean;

/** The store's completion of the event id's record. */
const completion = (id: string) => (statement: Statement) =>
  (statement.text === COMPLETE.text ||
    statement.text === COMPLETE_ALONE.text) &&
  statement.values[1] === id &&
  statement.values[3] === 'completed';
const orderWrite = (id: string) => (statement: Statement) =>
  /^\s*insert\s+into\s+"?orders"?/i.test(statement.text) &&
  statement.values.includes(id);
// Only the cell's delivery runs while its fault is armed.
const commit = () => (statement: Statement) => statement.text === 'COMMIT';

/**
 * The cells of the fault-point matrix around a receiver's completion (see
 * test/fault-matrix/postgres-cells.ts): the point, the statement and the
 * session's end. The delivery gets 503 (nothing stored, or the commit in
 * doubt); the provider's next delivery runs the handler, or replays the
 * committed answer.
 */
interface Cell {
  readonly point: string;
  readonly at: At;
  readonly timing: FaultTiming;
  /** What the provider's next delivery does. */
  readonly next: 'runs' | 'replays';
}
const CELLS: readonly Cell[] = [
  { point: 'the write, after', at: orderWrite, timing: 'after', next: 'runs' },
  {
    point: 'the completion, before',
    at: orderWrite,
    timing: 'after-reply',
    next: 'runs',
  },
  {
    point: 'the completion, after',
    at: completion,
    timing: 'after',
    next: 'runs',
  },
  {
    point: 'the completion, in reply',
    at: completion,
    timing: 'in-reply',
    next: 'runs',
  },
  {
    point: 'the commit, before',
    at: completion,
    timing: 'after-reply',
    next: 'runs',
  },
  {
    point: 'the commit, in reply',
    at: commit,
    timing: 'in-reply',
    next: 'runs',
  },
  // Committed, the answer lost: the provider's next delivery gets the 2xx.
  { point: 'the commit, after', at: commit, timing: 'after', next: 'replays' },
];

const PRESETS: readonly WebhookPresetName[] = [
  'stripe',
  'github',
  'standard-webhooks',
];

describe.each(PLATFORMS)(
  'a webhook receiver under the fault-point matrix (%s)',
  (platform) => {
    let target: TestApp;
    let faults: StatementFaults;

    beforeAll(async () => {
      target = await startTestApp({
        imports: [WebhooksTestModule],
        platform,
        rawBody: true,
      });
      faults = await StatementFaults.install(
        typeormPool(target.dataSource),
        target.db.url,
      );
    });
    afterAll(async () => {
      await faults?.restore();
      await target?.close();
    });

    /** The rows of event `id` and whether its record is completed. */
    const state = async (id: string) => {
      const orders = await target.db.query(
        'SELECT id FROM orders WHERE reference = $1',
        [id],
      );
      const [record] = await target.db.query<{ status: string }>(
        `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
        [id],
      );
      return {
        orders: orders.length,
        completed: record?.status === 'completed',
      };
    };
    /** Never a 2xx without the effect; the effect exactly when completed. */
    const expectConsistent = async (id: string, reply: Answer) => {
      const now = await state(id);
      expect(now).toEqual(
        now.completed
          ? { orders: 1, completed: true }
          : { orders: 0, completed: false },
      );
      if (reply.status >= 200 && reply.status < 300) {
        expect(now).toEqual({ orders: 1, completed: true });
      }
    };

    describe.each(PRESETS)('%s', (preset) => {
      it.each(CELLS)(
        'the connection lost at $point: 503, and the next delivery $next',
        async ({ at, timing, next: expected }) => {
          const id = eventId(preset);
          const delivery = signedDelivery(preset, {
            id,
            payload: payloadOf(preset, id),
            secret: SECRETS[preset][0],
          });
          const deliver = () =>
            answer(
              fetch(`${target.url}${ROUTES[preset]}`, {
                method: 'POST',
                headers: delivery.headers,
                body: delivery.body,
              }),
            );
          const fault = faults.arm({ matches: at(id), timing });
          const first = await deliver();
          await fault.injected;
          expect(first.status).toBe(503);
          await expectConsistent(id, first);

          const next = await deliver();
          expect(next).toMatchObject({
            status: 200,
            replayed: expected === 'replays',
          });
          await expectConsistent(id, next);
          expect(await state(id)).toEqual({ orders: 1, completed: true });
        },
      );
    });
  },
);
