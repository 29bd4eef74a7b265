import { randomBytes, randomInt } from 'node:crypto';
import { getRepositoryToken } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyConflictException,
  IdempotencyKeyInvalidException,
  IdempotencyKeyReusedException,
  IdempotencyNotReplayableException,
  IdempotencyService,
  IdempotencyUnavailableException,
} from '../../src/index.js';
import { IDEMPOTENCY_TABLE_NAME } from '../../migrations/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier, untilWaiting } from '../utils/barrier.js';
import { inProgress } from '../utils/problems.js';
import { startTestApp, type TestApp } from '../utils/test-app.js';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Body, Controller, Module, Post } from '@nestjs/common';
import type { Request } from 'express';
import { Idempotent } from '../../src/index.js';
import { answer } from '../utils/problems.js';

/** `length` random letters and digits: text PostgreSQL cannot compress. */
function randomText(length: number): string {
  const letters =
    'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(length)]
    .map((byte) => letters[byte % letters.length])
    .join('');
}

/** `length` random CJK ideographs (three bytes each in UTF-8), incompressible. */
function randomCjk(length: number): string {
  return String.fromCodePoint(
    ...Array.from({ length }, () => 0x4e00 + randomInt(0x5000)),
  );
}

@Module({ imports: [TypeOrmModule.forFeature([Order])] })
class OrdersFeature {}

/** Imports over HTTP, the same request by the hash of their content. */
@Controller('imports')
class ImportsController {
  runs = 0;

  @Post()
  @Idempotent({
    fingerprint: (context) =>
      (context.switchToHttp().getRequest<Request>().body as { hash: string })
        .hash,
  })
  create(@Body() body: { hash: string }) {
    this.runs += 1;
    return { imported: body.hash };
  }
}

describe('IdempotencyService.run()', () => {
  let target: TestApp;
  let idempotency: IdempotencyService;
  let orders: Repository<Order>;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [OrdersFeature],
      controllers: [ImportsController],
    });
    idempotency = target.app.get(IdempotencyService);
    orders = target.app.get(getRepositoryToken(Order));
  });
  afterAll(() => target.close());

  const rows = async (reference: string) =>
    (
      await target.db.query('SELECT 1 FROM orders WHERE reference = $1', [
        reference,
      ])
    ).length;

  it('runs once per key, in one transaction with the application repositories, and returns the stored result after', async () => {
    let runs = 0;
    const job = () =>
      idempotency.run(
        { key: 'job-1', name: 'import-orders' },
        async (manager) => {
          runs += 1;
          await orders.insert({ reference: 'job-1', source: 'repository' });
          await manager.insert(Order, {
            reference: 'job-1',
            source: 'manager',
          });
          const [{ same }] = await orders.query(
            `SELECT count(DISTINCT xmin::text)::int = 1 AS same FROM orders WHERE reference = 'job-1'`,
          );
          return { imported: 2, sameTransaction: same as boolean };
        },
      );
    expect(await job()).toEqual({ imported: 2, sameTransaction: true });
    expect(await job()).toEqual({ imported: 2, sameTransaction: true });
    expect(runs).toBe(1);
    expect(await rows('job-1')).toBe(2);
    expect(
      await target.db.query(
        `SELECT method, path, status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-1'`,
      ),
    ).toEqual([{ method: 'RUN', path: 'import-orders', status: 'completed' }]);
  });

  it('stores nothing when the work throws: the retry runs again', async () => {
    let runs = 0;
    const job = () =>
      idempotency.run({ key: 'job-2' }, async () => {
        runs += 1;
        await orders.insert({ reference: 'job-2' });
        if (runs === 1) {
          throw new Error('downstream failed');
        }
        return 'done';
      });
    await expect(job()).rejects.toThrow('downstream failed');
    expect(await rows('job-2')).toBe(0);
    // Its claim was released: the retry runs at once.
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-2'`,
      ),
    ).toEqual([]);
    expect(await job()).toBe('done');
    expect(runs).toBe(2);
    expect(await rows('job-2')).toBe(1);
  });

  it('stores nothing for a result that is not JSON: the caller gets the error, the writes roll back, the key is free at once', async () => {
    let runs = 0;
    const job = () =>
      idempotency.run({ key: 'job-bigint' }, async () => {
        runs += 1;
        await orders.insert({ reference: 'job-bigint' });
        return runs === 1 ? { total: 1n } : { total: '1' };
      });
    await expect(job()).rejects.toThrow(TypeError);
    expect(await rows('job-bigint')).toBe(0);
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-bigint'`,
      ),
    ).toEqual([]);
    expect(await job()).toEqual({ total: '1' });
    expect(runs).toBe(2);
    expect(await rows('job-bigint')).toBe(1);
  });

  it("fails with the work's own error when the work caught the failure of its statement and returned: nothing commits, the key is free at once", async () => {
    let runs = 0;
    const job = () =>
      idempotency.run({ key: 'job-aborted' }, async (manager) => {
        runs += 1;
        await orders.insert({ reference: 'job-aborted' });
        if (runs === 1) {
          // Its transaction is aborted from here on.
          await manager.query('SELECT 1 / 0').catch(() => undefined);
        }
        return 'done';
      });
    const failure = await job().then(
      () => undefined,
      (error: unknown) => error,
    );
    // The work's error, not the 503 of an unavailable database, which
    // would ask for a retry that meets the same.
    expect(failure).toBeInstanceOf(Error);
    expect(failure).not.toBeInstanceOf(IdempotencyUnavailableException);
    expect((failure as Error).name).toBe('TransactionAbortedError');
    expect(await rows('job-aborted')).toBe(0);
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-aborted'`,
      ),
    ).toEqual([]);
    expect(await job()).toBe('done');
    expect(await rows('job-aborted')).toBe(1);
  });

  it('refuses a concurrent duplicate (reject) and waits for it (wait)', async () => {
    const barrier = new Barrier();
    let runs = 0;
    const work = async () => {
      runs += 1;
      await orders.insert({ reference: 'job-3' });
      await barrier.wait();
      return { run: runs };
    };
    const first = idempotency.run({ key: 'job-3' }, work);
    await barrier.reached(1);
    await expect(
      idempotency.run({ key: 'job-3' }, work),
    ).rejects.toBeInstanceOf(IdempotencyConflictException);
    const waiting = idempotency.run(
      { key: 'job-3', concurrency: 'wait' },
      work,
    );
    // The waiting run marked the claim: the first wakes it on completion.
    await untilWaiting(target.db, 'job-3');
    barrier.open();
    expect(await first).toEqual({ run: 1 });
    expect(await waiting).toEqual({ run: 1 });
    expect(runs).toBe(1);
    expect(await rows('job-3')).toBe(1);
  });

  it('abandons work still running at its transactionTimeout: 503, the key is free at once, and its later writes never commit', async () => {
    const held = new Barrier();
    const resumed = new Barrier();
    let lateError: unknown;
    const slow = idempotency.run(
      { key: 'job-7', transactionTimeout: '300ms' },
      async (manager) => {
        await manager.insert(Order, { reference: 'job-7', source: 'first' });
        await held.wait();
        try {
          await orders.insert({ reference: 'job-7', source: 'late' });
        } catch (error) {
          lateError = error;
        }
        await resumed.wait();
        return 'first';
      },
    );
    await expect(slow).rejects.toBeInstanceOf(IdempotencyUnavailableException);
    const retry = await idempotency.run({ key: 'job-7' }, async () => {
      await orders.insert({ reference: 'job-7', source: 'retry' });
      return 'retry';
    });
    expect(retry).toBe('retry');

    // The abandoned work goes on, and its next statement fails.
    held.open();
    await resumed.reached(1);
    resumed.open();
    expect(lateError).toBeInstanceOf(Error);
    expect(
      await target.db.query(
        `SELECT source FROM orders WHERE reference = 'job-7'`,
      ),
    ).toEqual([{ source: 'retry' }]);
    expect(await idempotency.run({ key: 'job-7' }, () => 'again')).toBe(
      'retry',
    );
  });

  it('refuses the key of another request, and a malformed key', async () => {
    await idempotency.run({ key: 'job-4', fingerprint: 'payload-a' }, () => 1);
    await expect(
      idempotency.run({ key: 'job-4', fingerprint: 'payload-b' }, () => 2),
    ).rejects.toBeInstanceOf(IdempotencyKeyReusedException);
    const malformed: unknown = await idempotency
      .run({ key: 'job 5' }, () => 1)
      .catch((error: unknown) => error);
    expect(malformed).toBeInstanceOf(IdempotencyKeyInvalidException);
    // It names the option the key came from, not a header.
    expect(
      (malformed as IdempotencyKeyInvalidException).getProblem().detail,
    ).toBe('The key of the "key" option is invalid: it has an invalid format.');
  });

  it('never replays a run to an HTTP request under its key whose fingerprint function returns the run’s fingerprint: 422', async () => {
    expect(
      await idempotency.run({ key: 'job-9', fingerprint: 'sha-abc' }, () => ({
        nightly: true,
      })),
    ).toEqual({ nightly: true });
    const imports = target.app.get(ImportsController);
    const post = () =>
      answer(
        fetch(`${target.url}/imports`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': 'job-9',
          },
          body: JSON.stringify({ hash: 'sha-abc' }),
        }),
      );
    expect(await post()).toMatchObject({
      status: 422,
      replayed: false,
      body: { type: 'urn:idempotency:key-reused', status: 422 },
    });
    expect(imports.runs).toBe(0);
    // And the other way round: a run under an HTTP request's key.
    await target.db.query(
      `DELETE FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-9'`,
    );
    expect(await post()).toMatchObject({
      status: 201,
      body: { imported: 'sha-abc' },
    });
    await expect(
      idempotency.run({ key: 'job-9', fingerprint: 'sha-abc' }, () => 1),
    ).rejects.toBeInstanceOf(IdempotencyKeyReusedException);
  });

  it('replays a run stored by 0.6, whose record carries its fingerprint alone, to a run of that fingerprint', async () => {
    let runs = 0;
    const job = () =>
      idempotency.run({ key: 'job-10', fingerprint: 'payload-old' }, () => {
        runs += 1;
        return { runs };
      });
    expect(await job()).toEqual({ runs: 1 });
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'payload-old' WHERE key = 'job-10'`,
    );
    expect(await job()).toEqual({ runs: 1 });
    expect(runs).toBe(1);
  });

  it('never replays an HTTP response to a run whose fingerprint is the stored fingerprint of the HTTP request, nor its value in a record of 0.6: 422', async () => {
    const imports = target.app.get(ImportsController);
    const post = (key: string) =>
      answer(
        fetch(`${target.url}/imports`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': key,
          },
          body: JSON.stringify({ hash: 'sha-def' }),
        }),
      );
    const before = imports.runs;
    for (const key of ['job-11', 'job-12']) {
      expect(await post(key)).toMatchObject({ status: 201 });
    }
    const [{ fingerprint }] = await target.db.query<{ fingerprint: string }>(
      `SELECT fingerprint FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-11'`,
    );
    // As 0.6 wrote it: the fingerprint function's value alone.
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'sha-def' WHERE key = 'job-12'`,
    );
    let runs = 0;
    for (const [key, value] of [
      ['job-11', fingerprint],
      ['job-12', 'sha-def'],
    ]) {
      await expect(
        idempotency.run({ key, fingerprint: value }, () => {
          runs += 1;
        }),
      ).rejects.toBeInstanceOf(IdempotencyKeyReusedException);
    }
    expect(runs).toBe(0);
    expect(imports.runs).toBe(before + 2);
    // The record of 0.6 still replays to its own route.
    expect(await post('job-12')).toMatchObject({
      status: 201,
      replayed: true,
      body: { imported: 'sha-def' },
    });
  });

  it('refuses a request of another kind under the key of a run of 0.6 in progress with 422, and a run of its value with 409', async () => {
    const held = new Barrier();
    const running = idempotency.run(
      { key: 'job-14', fingerprint: 'sha-ghi' },
      async () => {
        await held.wait();
        return 'held';
      },
    );
    await held.reached();
    // As 0.6 wrote it: the value alone.
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'sha-ghi' WHERE key = 'job-14'`,
    );
    const imports = target.app.get(ImportsController);
    const before = imports.runs;
    expect(
      await answer(
        fetch(`${target.url}/imports`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': 'job-14',
          },
          body: JSON.stringify({ hash: 'sha-ghi' }),
        }),
      ),
    ).toMatchObject({
      status: 422,
      body: { type: 'urn:idempotency:key-reused' },
    });
    await expect(
      idempotency.run({ key: 'job-14', fingerprint: 'sha-ghi' }, () => 'again'),
    ).rejects.toBeInstanceOf(IdempotencyConflictException);
    held.open();
    expect(await running).toBe('held');
    expect(imports.runs).toBe(before);
  });

  it('replays a run stored by 0.6 to a run of another name (0.6 did), and never a run’s fingerprint of another run', async () => {
    let runs = 0;
    const job = (name: string, fingerprint: string) =>
      idempotency.run({ key: 'job-13', name, fingerprint }, () => {
        runs += 1;
        return { runs };
      });
    expect(await job('nightly', 'payload-1')).toEqual({ runs: 1 });
    const [{ fingerprint }] = await target.db.query<{ fingerprint: string }>(
      `SELECT fingerprint FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = 'job-13'`,
    );
    await expect(job('nightly', fingerprint)).rejects.toBeInstanceOf(
      IdempotencyKeyReusedException,
    );
    await target.db.query(
      `UPDATE ${IDEMPOTENCY_TABLE_NAME} SET fingerprint = 'payload-1' WHERE key = 'job-13'`,
    );
    expect(await job('hourly', 'payload-1')).toEqual({ runs: 1 });
    expect(runs).toBe(1);
  });

  it('keeps scopes apart', async () => {
    expect(
      await idempotency.run({ key: 'job-6', scope: 'tenant-a' }, () => 'a'),
    ).toBe('a');
    expect(
      await idempotency.run({ key: 'job-6', scope: 'tenant-b' }, () => 'b'),
    ).toBe('b');
    expect(
      await idempotency.run({ key: 'job-6', scope: 'tenant-a' }, () => 'again'),
    ).toBe('a');
  });

  it.each([
    ['an empty scope', ''],
    // Longer than the record's index takes with a long key: its claim
    // would fail at every retry (a 503 for ever).
    ['a scope of 1,025 bytes', randomText(1025)],
    ['a scope of 1,026 bytes in 513 characters', 'é'.repeat(513)],
    // PostgreSQL's driver writes U+FFFD in its place: it would share the
    // record of another scope.
    ['a scope with a lone surrogate', 'tenant-\ud800'],
    // PostgreSQL refuses it: every retry would get a 503.
    ['a scope with a NUL character', 'tenant\u0000x'],
  ])(
    'refuses %s, as a scope resolver’s, and runs nothing',
    async (_what, scope) => {
      let ran = false;
      await expect(
        idempotency.run({ key: 'job-7', scope }, () => {
          ran = true;
        }),
      ).rejects.toBeInstanceOf(IdempotencyConfigurationError);
      expect(ran).toBe(false);
    },
  );
});

describe('IdempotencyService.run() with keys of any text', () => {
  let target: TestApp;
  let idempotency: IdempotencyService;

  beforeAll(async () => {
    target = await startTestApp({
      idempotency: { keyValidation: { pattern: /^[\s\S]+$/, maxLength: 1024 } },
    });
    idempotency = target.app.get(IdempotencyService);
  });
  afterAll(() => target?.close());

  /** The refusal of a run with `key` (its problem's detail), and whether it ran. */
  const refusal = async (options: { key: string; scope?: string }) => {
    let ran = false;
    const error: unknown = await idempotency
      .run(options, () => {
        ran = true;
      })
      .catch((caught: unknown) => caught);
    return {
      ran,
      detail:
        error instanceof IdempotencyKeyInvalidException
          ? error.getProblem().detail
          : error,
    };
  };
  const records = (key: string) =>
    target.db.query<{ scope: string; key: string }>(
      `SELECT scope, key FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key LIKE $1`,
      [`${key}%`],
    );

  it('keeps apart two tenants whose scopes differ by a lone surrogate: the scope PostgreSQL would write as the other is refused, the other runs its own', async () => {
    await expect(
      idempotency.run({ scope: 'tenant-\ud800', key: 'invoice-1' }, () => ({
        tenant: 'A',
      })),
    ).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    expect(
      await idempotency.run(
        { scope: 'tenant-\ufffd', key: 'invoice-1' },
        () => ({
          tenant: 'B',
        }),
      ),
    ).toEqual({ tenant: 'B' });
    expect(await records('invoice-1')).toEqual([
      { scope: 'tenant-\ufffd', key: 'invoice-1' },
    ]);
  });

  it('refuses a key longer than 1,024 bytes of UTF-8, which PostgreSQL’s index cannot take, with 400 (invalid key) whatever maxLength counts, never a 503 to retry for ever', async () => {
    for (const [key, bytes] of [
      [randomCjk(1024), 3072],
      [randomCjk(342), 1026],
    ] as const) {
      for (let attempt = 0; attempt < 2; attempt += 1) {
        expect(await refusal({ key })).toEqual({
          ran: false,
          detail: `The key of the "key" option is invalid: it is ${bytes} bytes long in UTF-8, more than the 1024 a key may have.`,
        });
      }
    }
    expect(
      await target.db.query(
        `SELECT 1 FROM ${IDEMPOTENCY_TABLE_NAME} WHERE length(key) >= 342`,
      ),
    ).toEqual([]);
  });

  it('claims, completes and replays a key of 1,024 bytes of UTF-8 in a scope of 1,024 bytes, neither compressible: within the index', async () => {
    const key = `${randomCjk(341)}k`;
    const scope = `${randomCjk(341)}s`;
    let runs = 0;
    const work = () => {
      runs += 1;
      return 'done';
    };
    expect(await idempotency.run({ key, scope }, work)).toBe('done');
    expect(await idempotency.run({ key, scope }, work)).toBe('done');
    expect(runs).toBe(1);
  });

  it('refuses a key with a NUL character, which PostgreSQL refuses, with 400 (invalid key), never a 503 to retry for ever', async () => {
    for (let attempt = 0; attempt < 2; attempt += 1) {
      expect(await refusal({ key: 'nul\u0000key' })).toEqual({
        ran: false,
        detail:
          'The key of the "key" option is invalid: it has a NUL character (U+0000), which PostgreSQL cannot store.',
      });
    }
    expect(await records('nul')).toEqual([]);
  });

  it('refuses a name with a NUL character, which PostgreSQL refuses, with a configuration error before any claim, never a 503 to retry for ever', async () => {
    let runs = 0;
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const error: unknown = await idempotency
        .run({ key: 'named-1', name: 'import\u0000orders' }, () => {
          runs += 1;
        })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(IdempotencyConfigurationError);
      expect((error as Error).message).toContain(
        'The name of IdempotencyService.run() is "import\\u0000orders": it has a NUL character (U+0000), which PostgreSQL cannot store.',
      );
    }
    expect(runs).toBe(0);
    expect(await records('named-1')).toEqual([]);
    expect(
      await idempotency.run({ key: 'named-1', name: 'import orders' }, () => {
        runs += 1;
        return 'imported';
      }),
    ).toBe('imported');
    expect(runs).toBe(1);
  });

  it('refuses a key with a lone surrogate with 400 (invalid key), whatever its pattern lets through, and runs nothing: it never shares the record of the key with U+FFFD', async () => {
    for (const key of ['order-\ud800', 'order-\udc00x', 'order-\ud800\ud800']) {
      expect(await refusal({ key })).toEqual({
        ran: false,
        detail:
          'The key of the "key" option is invalid: it is not well-formed Unicode (it has a lone surrogate).',
      });
    }
    expect(await records('order-')).toEqual([]);
    expect(await idempotency.run({ key: 'order-\ufffd' }, () => 'own')).toBe(
      'own',
    );
    // A pair of surrogates is one character: valid.
    expect(
      await idempotency.run({ key: 'order-\ud83d\ude00' }, () => 'pair'),
    ).toBe('pair');
    expect(
      await idempotency.run({ key: 'order-\ud83d\ude00' }, () => 'again'),
    ).toBe('pair');
  });
});

describe('IdempotencyService.run() with the longest scope and key', () => {
  let target: TestApp;

  beforeAll(async () => {
    target = await startTestApp({
      idempotency: { keyValidation: { maxLength: 1024 } },
    });
  });
  afterAll(() => target?.close());

  it('claims, completes and replays a key of 1,024 characters in a scope of 1,024 bytes (neither compressible): within the index', async () => {
    const idempotency = target.app.get(IdempotencyService);
    const key = randomText(1024);
    const scope = randomText(1024);
    let runs = 0;
    const work = () => {
      runs += 1;
      return 'done';
    };
    expect(await idempotency.run({ key, scope }, work)).toBe('done');
    expect(await idempotency.run({ key, scope }, work)).toBe('done');
    expect(runs).toBe(1);
  });
});

describe('IdempotencyService.run() with maxResponseSize', () => {
  let target: TestApp;
  let idempotency: IdempotencyService;

  beforeAll(async () => {
    target = await startTestApp({ idempotency: { maxResponseSize: 64 } });
    idempotency = target.app.get(IdempotencyService);
  });
  afterAll(() => target.close());

  it('stores a result within maxResponseSize, and marks a larger one not replayable: its duplicate is refused without running', async () => {
    let runs = 0;
    const large = 'x'.repeat(100);
    const job = (key: string, result: string) => () =>
      idempotency.run({ key }, () => {
        runs += 1;
        return result;
      });
    expect(await job('run-small', 'fits')()).toBe('fits');
    expect(await job('run-small', 'fits')()).toBe('fits');
    expect(runs).toBe(1);
    expect(await job('run-large', large)()).toBe(large);
    await expect(job('run-large', large)()).rejects.toBeInstanceOf(
      IdempotencyNotReplayableException,
    );
    expect(runs).toBe(2);
    expect(
      await target.db.query(
        `SELECT key, status FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key IN ('run-small', 'run-large') ORDER BY key`,
      ),
    ).toEqual([
      { key: 'run-large', status: 'not_replayable' },
      { key: 'run-small', status: 'completed' },
    ]);
  });
});

describe('IdempotencyService.run() with retryAfter', () => {
  let target: TestApp;
  let idempotency: IdempotencyService;

  beforeAll(async () => {
    target = await startTestApp({
      imports: [OrdersFeature],
      idempotency: { retryAfter: 7 },
    });
    idempotency = target.app.get(IdempotencyService);
  });
  afterAll(() => target.close());

  it('refuses a concurrent duplicate (reject) with a conflict that says why, and carries the retry delay the HTTP 409 announces', async () => {
    const barrier = new Barrier();
    const run = (result: string) =>
      idempotency.run(
        { key: 'job-conflict', scope: 'tenant-c', concurrency: 'reject' },
        async (manager) => {
          await manager.insert(Order, { reference: 'job-conflict' });
          await barrier.wait();
          return result;
        },
      );
    const first = run('first');
    await barrier.reached(1);
    const conflict: unknown = await run('second').catch(
      (error: unknown) => error,
    );
    barrier.open();
    expect(await first).toBe('first');

    expect(conflict).toBeInstanceOf(IdempotencyConflictException);
    const { message, retryAfterSeconds, headers } =
      conflict as IdempotencyConflictException;
    expect({
      message,
      retryAfterSeconds,
      headers,
      problem: (conflict as IdempotencyConflictException).getProblem(),
    }).toEqual({
      message:
        'Request in progress: A request with this idempotency key is still being processed. Retry later to get its response.',
      retryAfterSeconds: 7,
      headers: { 'Retry-After': '7' },
      problem: inProgress('job-conflict'),
    });
    expect(
      await target.db.query(
        `SELECT count(*)::int AS rows FROM orders WHERE reference = 'job-conflict'`,
      ),
    ).toEqual([{ rows: 1 }]);
  });
});
