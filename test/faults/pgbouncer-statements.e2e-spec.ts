import { Logger } from '@nestjs/common';
import { jest } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import {
  createAdapterDatabase,
  startAdapterApp,
} from '../adapters/adapter-app.js';
import { ADAPTERS } from '../adapters/adapters.js';
import { ordersModule } from '../module/module.fixtures.js';
import { startTestApp } from '../utils/test-app.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import {
  describeWithPgBouncer,
  startPgBouncer,
  type PgBouncer,
} from './pgbouncer.js';

/*
 * The PostgreSQL store sends its statements as named prepared statements.
 * A transaction pooler without prepared-statement support (PgBouncer 1.18,
 * as Debian ships it, in transaction pooling) hands a client's statements
 * to server sessions that did not prepare them, or that another client's
 * statement of the same name prepared already: the store turns to unnamed
 * statements at the first refusal, and no request is lost to it: on
 * TypeORM (an orders handler) and on every other data library's adapter
 * (the payments handler of test/adapters).
 */
/** An application of the spec, on the database behind PgBouncer. */
interface Subject {
  readonly name: string;
  /** The database, with the tables of the application's handler. */
  database(): Promise<TestDatabase>;
  /** Starts the application, its pool connecting to `url` (PgBouncer). */
  start(
    db: TestDatabase,
    url: string,
  ): Promise<{ app: INestApplication; url: string; close(): Promise<void> }>;
  /** Posts the request of `key` (its body names it). */
  post(url: string, key: string): Promise<Response>;
  /** The rows the handler wrote, a reference each: how many per reference. */
  readonly countRows: string;
}

const post = (url: string, path: string, key: string, body: unknown) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

const SUBJECTS: readonly Subject[] = [
  {
    name: 'TypeORM',
    database: createTestDatabase,
    start: (db, url) =>
      startTestApp({
        database: { ...db, url },
        typeorm: { extra: { max: 4 } },
        idempotency: { presence: false },
        imports: [ordersModule()],
      }),
    post: (url, key) => post(url, '/orders', key, { reference: key }),
    countRows: `SELECT reference, count(*)::int AS n FROM orders GROUP BY reference`,
  },
  ...ADAPTERS.filter((fixture) => fixture.name !== 'typeorm').map(
    (fixture): Subject => ({
      name: fixture.name,
      database: createAdapterDatabase,
      start: (db, url) =>
        startAdapterApp(fixture, {
          database: db,
          clientUrl: url,
          idempotency: { presence: false },
        }),
      post: (url, key) => post(url, '/payments', key, { key, amount: 10 }),
      countRows: `SELECT key AS reference, count(*)::int AS n FROM payments GROUP BY key`,
    }),
  ),
];

describeWithPgBouncer()(
  'named statements behind PgBouncer without prepared-statement support',
  () => {
    describe.each(SUBJECTS)('on $name', (subject) => {
      let db: TestDatabase;
      let bouncer: PgBouncer;
      let target: { url: string; close(): Promise<void> };
      let warn: jest.Spied<Logger['warn']>;

      beforeAll(async () => {
        db = await subject.database();
        // One server session for every client of the application's pool: the
        // second client's first statement meets the first one's.
        bouncer = await startPgBouncer(db.url, { poolSize: 1 });
        // Observed, not replaced: the lines are logged as ever.
        warn = jest.spyOn(Logger.prototype, 'warn');
        target = await subject.start(db, bouncer.url);
      });
      afterAll(async () => {
        warn?.mockRestore();
        await target?.close();
        await bouncer?.stop();
        await db?.drop();
      });
      it('turns to unnamed statements at the first refusal: every key executes once, a refused completion is a 503 its retry executes', async () => {
        const keys = Array.from({ length: 24 }, () => randomUUID());
        const send = (key: string) => subject.post(target.url, key);
        // Eight at a time: the pool opens all its clients, each meeting the
        // one server session.
        const statuses = new Map<string, number[]>();
        for (let at = 0; at < keys.length; at += 8) {
          await Promise.all(
            keys.slice(at, at + 8).map(async (key) => {
              // A retry for each 503, a few at most: the assertions below
              // tell how many there were.
              for (let sent = 0; sent < 4; sent += 1) {
                const { status } = await send(key);
                statuses.set(key, [...(statuses.get(key) ?? []), status]);
                if (status !== 503) {
                  return;
                }
              }
            }),
          );
        }
        const refused = [...statuses.values()].filter(
          (seen) => seen.length > 1,
        );
        console.log(
          `named statements behind PgBouncer (one server session, ${subject.name}): ${keys.length} keys, ${refused.length} answered 503 once before their retry executed`,
        );
        for (const key of keys) {
          const seen = statuses.get(key)!;
          expect({ key, seen }).toEqual({
            key,
            seen: [...seen.slice(0, -1).map(() => 503), 201],
          });
          // A 503 is the completion refused inside the transaction, once.
          expect(seen.length).toBeLessThanOrEqual(2);
        }
        const rows = await db.query<{ reference: string; n: number }>(
          subject.countRows,
        );
        expect(
          rows.sort((a, b) => a.reference.localeCompare(b.reference)),
        ).toEqual([...keys].sort().map((reference) => ({ reference, n: 1 })));
        const turned = warn.mock.calls.filter(([message]: unknown[]) =>
          String(message).includes('sends unnamed statements from now on'),
        );
        expect(turned).toHaveLength(1);
        // Replays go through as well.
        const replay = await send(keys[0]);
        expect(replay.status).toBe(201);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
      });
    });
  },
);
