import { Controller, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import {
  IdempotencyConfigurationError,
  IdempotencyModule,
  Idempotent,
} from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { answer, UNAVAILABLE } from '../utils/problems.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import { Barrier } from '../utils/barrier.js';
import { PlainService, PlainTestModule } from './plain.module.js';

/** A route with a level PostgreSQL does not have. */
@Controller()
class SnapshotController {
  @Post('snapshot')
  @Idempotent({ isolationLevel: 'SNAPSHOT' as never })
  snapshot() {
    return {};
  }
}

describe.each(PLATFORMS)('isolation level (%s)', (platform) => {
  let target: TestApp;
  let service: PlainService;

  beforeAll(async () => {
    target = await startTestApp({ imports: [PlainTestModule], platform });
    service = target.app.get(PlainService);
  });
  afterAll(() => target.close());
  beforeEach(() =>
    target.db.query(`TRUNCATE orders, ${IDEMPOTENCY_TABLE_NAME}`),
  );

  const sources = async (reference: string) =>
    (
      await target.db.query<{ source: string }>(
        'SELECT source FROM orders WHERE reference = $1 ORDER BY id',
        [reference],
      )
    ).map((row) => row.source);
  const records = (key: string) =>
    target.db.query<{ status: string }>(
      `SELECT status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
      [key],
    );

  it("runs a handler at the server's default level unless told", async () => {
    const response = await send(target, '/level', {
      key: 'default-1',
      body: { reference: 'd1' },
    });
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ level: 'read committed' });
  });

  it("begins the handler's transaction at the route's isolationLevel, and commits the record in it", async () => {
    const response = await send(target, '/serializable', {
      key: 'serializable-1',
      body: { reference: 's1' },
    });
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ level: 'serializable' });
    expect(await sources('s1')).toEqual(['api']);
    expect(await records('serializable-1')).toEqual([{ status: 'completed' }]);
  });

  it('answers a serialization failure with 503, writes nothing, and the retry runs', async () => {
    service.skew = new Barrier();
    const first = send(target, '/skew', {
      key: 'skew-1',
      body: { reference: 'k1' },
    });
    const second = send(target, '/skew', {
      key: 'skew-2',
      body: { reference: 'k2' },
    });
    // Both have read that there is no row before either writes.
    await service.skew.reached(2);
    service.skew.open();
    const answers = await Promise.all([answer(first), answer(second)]);
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([201, 503]);
    const failed = answers.find((a) => a.status === 503)!;
    expect(failed.body).toEqual(UNAVAILABLE);
    expect(failed.retryAfter).toBe('1');
    const failedKey = answers[0].status === 503 ? 'skew-1' : 'skew-2';
    const failedReference = failedKey === 'skew-1' ? 'k1' : 'k2';
    expect(await sources(failedReference)).toEqual([]);
    expect(await records(failedKey)).toEqual([]);

    const retried = await send(target, '/skew', {
      key: failedKey,
      body: { reference: failedReference },
    });
    expect(retried.status).toBe(201);
    expect(await retried.json()).toEqual({ before: 1 });
    expect(await sources(failedReference)).toEqual(['skew']);
  });

  it("lets a savepoint ask for the level the handler's transaction runs at", async () => {
    const atRoute = await send(target, '/serializable-savepoint', {
      key: 'savepoint-1',
      body: { reference: 'p1', level: 'SERIALIZABLE' },
    });
    expect(atRoute.status).toBe(201);
    expect(await atRoute.json()).toEqual({ level: 'serializable' });
    expect(await sources('p1')).toEqual(['outer', 'savepoint']);

    // The server's default, as the server reports it.
    const atDefault = await send(target, '/savepoint', {
      key: 'savepoint-2',
      body: { reference: 'p2', level: 'READ COMMITTED' },
    });
    expect(atDefault.status).toBe(201);
    expect(await atDefault.json()).toEqual({ level: 'read committed' });
    expect(await sources('p2')).toEqual(['outer', 'savepoint']);
  });

  it('refuses a savepoint that asks for another level, before it begins: the handler goes on, or nothing is written', async () => {
    const caught = await send(target, '/savepoint', {
      key: 'savepoint-3',
      body: { reference: 'p3', level: 'SERIALIZABLE', caught: true },
    });
    expect(caught.status).toBe(201);
    expect(await caught.json()).toEqual({
      refused: [
        "A transaction inside an @Idempotent() handler asked for isolation level SERIALIZABLE, but it joins the handler's transaction (as a savepoint), which runs at READ COMMITTED: a savepoint cannot change it.",
        'Potential solutions:',
        "- Set the level of the handler's transaction: @Idempotent({ isolationLevel: 'SERIALIZABLE' }) on the route, or in the module's options.",
        "- Or run the work in a transaction of its own: IdempotencyContext.newTransaction('SERIALIZABLE', fn).",
      ].join('\n'),
    });
    // The handler's transaction was left as it was, and committed.
    expect(await sources('p3')).toEqual(['outer', 'after']);
    expect(await records('savepoint-3')).toEqual([{ status: 'completed' }]);

    const refused = await send(target, '/savepoint', {
      key: 'savepoint-4',
      body: { reference: 'p4', level: 'SERIALIZABLE' },
    });
    expect(refused.status).toBe(500);
    expect(await sources('p4')).toEqual([]);
    expect(await records('savepoint-4')).toEqual([]);
  });
});

describe.each(PLATFORMS)('module-wide isolation level (%s)', (platform) => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  const level = async (path: string, key: string) => {
    const response = await send(target!, path, {
      key,
      body: { reference: key },
    });
    expect(response.status).toBe(201);
    return ((await response.json()) as { level: string }).level;
  };

  it('applies the module option, under the route option', async () => {
    target = await startTestApp({
      imports: [PlainTestModule],
      platform,
      idempotency: { isolationLevel: 'REPEATABLE READ' },
    });
    expect(await level('/level', 'module-1')).toBe('repeatable read');
    expect(await level('/serializable', 'module-2')).toBe('serializable');
  });

  it("applies the DataSource's isolationLevel when the module has none", async () => {
    target = await startTestApp({
      imports: [PlainTestModule],
      platform,
      typeorm: { isolationLevel: 'REPEATABLE READ' },
    });
    expect(await level('/level', 'datasource-1')).toBe('repeatable read');
    expect(await level('/serializable', 'datasource-2')).toBe('serializable');
  });

  it('refuses to start with a route isolation level PostgreSQL does not have', async () => {
    await expect(
      startTestApp({
        imports: [PlainTestModule],
        controllers: [SnapshotController],
        platform,
      }),
    ).rejects.toThrow(
      `Invalid "isolationLevel": "SNAPSHOT".\nPotential solutions:\n- Give 'READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ' or 'SERIALIZABLE'.`,
    );
  });
});

describe('isolation level option', () => {
  it('refuses a module isolation level PostgreSQL does not have', async () => {
    const compiling = Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          isolationLevel: 'read committed' as never,
        }),
      ],
    }).compile();
    await expect(compiling).rejects.toThrow(IdempotencyConfigurationError);
    await expect(compiling).rejects.toThrow(
      `Invalid "isolationLevel": "read committed".`,
    );
  });
});
