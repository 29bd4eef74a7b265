import { createHash } from 'node:crypto';
import pg from 'pg';
import { DataSource, type QueryRunner } from 'typeorm';
import {
  CreateIdempotencyFunctions1764000000002,
  CreateIdempotencyRecords1764000000000,
  CreateIdempotencySteps1764000000001,
  idempotencyMigrations,
} from '../../migrations/index.js';
import { legacyRequestFingerprint } from '../../src/core/request-fingerprint.js';
import { CreateOrders1764000000001 } from '../fixtures/create-orders.migration.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';
import { UpgradeTestModule } from './upgrade.module.js';

/** The migrations released in 0.1.0 (package.json 0.1.0, before the 0.2.0 bump). */
const RELEASED_0_1_0 = [
  CreateIdempotencyRecords1764000000000,
  CreateIdempotencySteps1764000000001,
  CreateIdempotencyFunctions1764000000002,
];
/**
 * sha256 of the statements those three migrations sent in 0.1.0 (their
 * `up()` statements, joined by `\n;\n`), computed from the released sources:
 * a shipped migration must never change, or databases migrated by 0.1.0
 * would differ from new ones.
 */
const RELEASED_0_1_0_SQL_SHA256 =
  '3fb05c0510434b24ddf252cfc705864e760dab762f124d423ea60e8b7aa718ac';

/** Statements that `up()` of `migrations` sends, recorded without a database. */
async function statementsOf(
  migrations: ReadonlyArray<new () => { up(q: QueryRunner): Promise<void> }>,
): Promise<string[]> {
  const statements: string[] = [];
  const recorder = {
    dataSource: { options: { type: 'postgres' } },
    query: (sql: string) => {
      statements.push(sql);
      return Promise.resolve([]);
    },
  } as unknown as QueryRunner;
  for (const Migration of migrations) {
    await new Migration().up(recorder);
  }
  return statements;
}

/** A response as 0.1.0 stored it. */
interface LegacyResponse {
  status: number;
  /** `undefined` for a response 0.1.0 could not store (not replayable). */
  headers?: Record<string, string>;
  body?: Buffer;
}

/**
 * Executes a request the way 0.1.0 did, in one transaction: the claim
 * function (advisory locks, reading the finished record), the handler's
 * write, then the complete function and COMMIT.
 */
async function executeAs010(
  client: pg.Client,
  request: { key: string; route: string; body: Record<string, unknown> },
  respond: (orderId: number) => LegacyResponse,
): Promise<number> {
  const fingerprint = legacyRequestFingerprint({
    method: 'POST',
    route: request.route,
    body: request.body,
  });
  await client.query('BEGIN');
  const { rows } = await client.query(
    'SELECT * FROM idempotency_claim($1, $2, $3, $4)',
    ['global', request.key, fingerprint, '30000'],
  );
  expect(rows).toEqual([
    expect.objectContaining({
      fingerprint_locked: true,
      locked: true,
      status: null,
    }),
  ]);
  const {
    rows: [{ id }],
  } = await client.query<{ id: number }>(
    `INSERT INTO orders (reference, source) VALUES ($1, 'v0.1.0') RETURNING id`,
    [request.body.reference],
  );
  const response = respond(id);
  await client.query(
    'SELECT idempotency_complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
    [
      'global',
      request.key,
      fingerprint,
      'POST',
      request.route,
      response.body ? 'completed' : 'not_replayable',
      response.status,
      response.headers ? JSON.stringify(response.headers) : null,
      response.body ?? null,
      24 * 3600 * 1000,
    ],
  );
  await client.query('COMMIT');
  return id;
}

describe('the migrations released in 0.1.0', () => {
  it('still send the statements of 0.1.0', async () => {
    const statements = await statementsOf(RELEASED_0_1_0);
    expect(
      createHash('sha256').update(statements.join('\n;\n')).digest('hex'),
    ).toBe(RELEASED_0_1_0_SQL_SHA256);
    expect(idempotencyMigrations.slice(0, RELEASED_0_1_0.length)).toEqual(
      RELEASED_0_1_0,
    );
  });
});

describe.each(PLATFORMS)('upgrading a database of 0.1.0 (%s)', (platform) => {
  let db: TestDatabase;
  let target: TestApp | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await target?.close();
    await db?.drop();
  });

  const snapshot = async () => ({
    records: await db.query(
      `SELECT scope, key, fingerprint, method, path, status, response_status,
              response_headers, response_body, created_at, completed_at, expires_at
       FROM idempotency_records ORDER BY key`,
    ),
    steps: await db.query(
      `SELECT scope, key, step, result, created_at, expires_at
       FROM idempotency_steps ORDER BY key, step`,
    ),
    orders: await db.query(
      'SELECT id, reference, source FROM orders ORDER BY id',
    ),
  });

  it('keeps every record and recovery point: after the new migrations they replay byte for byte over HTTP', async () => {
    // The database as 0.1.0 left it: its migrations, and the app's own table.
    const legacy = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: [...RELEASED_0_1_0, CreateOrders1764000000001],
    });
    await legacy.initialize();
    await legacy.runMigrations();
    await legacy.destroy();

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const jsonBody = (id: number) =>
      Buffer.from(JSON.stringify({ id, reference: 'legacy-order' }));
    const bytes = Buffer.from([0x00, 0xff, 0x7b, 0x0a, 0xc3, 0x28, 0x22]);
    try {
      await executeAs010(
        client,
        {
          key: 'legacy-order',
          route: '/upgrade/orders',
          body: { reference: 'legacy-order' },
        },
        (id) => ({
          status: 201,
          headers: {
            'content-type': 'application/json; charset=utf-8',
            'x-order-version': '1',
          },
          body: jsonBody(id),
        }),
      );
      await executeAs010(
        client,
        {
          key: 'legacy-bytes',
          route: '/upgrade/orders',
          body: { reference: 'legacy-bytes' },
        },
        () => ({
          status: 201,
          headers: {
            'content-type': 'application/octet-stream',
            'x-order-version': '1',
          },
          body: bytes,
        }),
      );
      await executeAs010(
        client,
        {
          key: 'legacy-stream',
          route: '/upgrade/orders',
          body: { reference: 'legacy-stream' },
        },
        () => ({ status: 201 }),
      );
      // A request of 0.1.0 that charged, then died before its commit: its
      // step committed on its own, as 0.1.0's saveStep wrote it.
      await client.query(
        `INSERT INTO idempotency_steps (scope, key, step, result, expires_at)
         VALUES ($1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond')
         ON CONFLICT (scope, key, step) DO UPDATE SET
           result = EXCLUDED.result, created_at = now(), expires_at = EXCLUDED.expires_at`,
        [
          'global',
          'legacy-charge',
          'charge',
          JSON.stringify({ id: 'ch_legacy' }),
          24 * 3600 * 1000,
        ],
      );
    } finally {
      await client.end();
    }
    const before = await snapshot();
    expect({
      records: before.records.length,
      steps: before.steps.length,
      orders: before.orders.length,
    }).toEqual({ records: 3, steps: 1, orders: 3 });

    // The upgrade: every migration of this version, as an application runs them.
    const upgrade = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: [...idempotencyMigrations, CreateOrders1764000000001],
    });
    await upgrade.initialize();
    const ran = await upgrade.runMigrations();
    await upgrade.destroy();
    const added = idempotencyMigrations
      .slice(RELEASED_0_1_0.length)
      .map((Migration) => new Migration().name);
    expect(added).toContain('LeaseIdempotencyClaims1764000000003');
    expect(ran.map((migration) => migration.name)).toEqual(added);

    // Nothing dropped, nothing rewritten; the new columns are empty.
    expect(await snapshot()).toEqual(before);
    expect(
      await db.query(
        `SELECT key, owner, owner_instance, lease_expires_at, waiting
         FROM idempotency_records ORDER BY key`,
      ),
    ).toEqual(
      ['legacy-bytes', 'legacy-order', 'legacy-stream'].map((key) => ({
        key,
        owner: null,
        owner_instance: null,
        lease_expires_at: null,
        waiting: false,
      })),
    );

    target = await startTestApp({
      platform,
      database: db,
      imports: [UpgradeTestModule],
      idempotency: { gc: false },
    });
    const orderId = (
      before.orders as Array<{ id: number; reference: string }>
    ).find((order) => order.reference === 'legacy-order')!.id;
    const replay = async (key: string, reference: string) => {
      const response = await send(target!, '/upgrade/orders', {
        key,
        body: { reference },
      });
      return {
        status: response.status,
        replayed: response.headers.get('idempotent-replayed'),
        contentType: response.headers.get('content-type'),
        version: response.headers.get('x-order-version'),
        body: Buffer.from(await response.arrayBuffer()),
      };
    };
    expect(await replay('legacy-order', 'legacy-order')).toEqual({
      status: 201,
      replayed: 'true',
      contentType: 'application/json; charset=utf-8',
      version: '1',
      body: jsonBody(orderId),
    });
    expect(await replay('legacy-bytes', 'legacy-bytes')).toEqual({
      status: 201,
      replayed: 'true',
      contentType: 'application/octet-stream',
      version: '1',
      body: bytes,
    });
    // Its status, without the body it never stored (the route's own
    // @Header() is set for this request, as for any).
    const notReplayable = await replay('legacy-stream', 'legacy-stream');
    expect(notReplayable).toEqual({
      status: 201,
      replayed: 'true',
      contentType: null,
      version: '2',
      body: Buffer.alloc(0),
    });
    // The fingerprint of 0.1.0 still tells another request apart.
    const reused = await replay('legacy-order', 'another-order');
    expect(reused.status).toBe(422);
    expect(JSON.parse(reused.body.toString())).toMatchObject({
      type: 'urn:idempotency:key-reused',
    });
    // The request that died in 0.1.0 resumes after its charge step.
    const resumed = await send(target, '/upgrade/checkout', {
      key: 'legacy-charge',
      body: { reference: 'legacy-charge' },
    });
    expect(resumed.status).toBe(201);
    expect(resumed.headers.get('idempotent-replayed')).toBeNull();
    const checkout = (await resumed.json()) as { id: number; charge: string };
    expect(checkout).toEqual({ id: expect.any(Number), charge: 'ch_legacy' });

    // No replay wrote anything; the resumed request wrote its one order.
    const after = await snapshot();
    expect(after.orders).toEqual([
      ...before.orders,
      { id: checkout.id, reference: 'legacy-charge', source: 'ch_legacy' },
    ]);
    expect(after.steps).toEqual([]);
    expect(
      after.records.map((record) => ({
        key: record.key,
        status: record.status,
      })),
    ).toEqual([
      { key: 'legacy-bytes', status: 'completed' },
      { key: 'legacy-charge', status: 'completed' },
      { key: 'legacy-order', status: 'completed' },
      { key: 'legacy-stream', status: 'not_replayable' },
    ]);
    // The records of 0.1.0 themselves are untouched by their replays.
    expect(
      after.records.filter((record) => record.key !== 'legacy-charge'),
    ).toEqual(before.records);
  });
});
