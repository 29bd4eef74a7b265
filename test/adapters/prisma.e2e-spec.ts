/**
 * What the Prisma adapter adds to the payments promise (payments.e2e-spec.ts
 * runs that one on Prisma too): the handler's interactive transaction holds
 * nothing until its first statement, lives until the module's deadline
 * whatever Prisma's own timeout and not a moment past it, answers 503 for a
 * serialization failure or a transaction that cannot begin, takes the
 * PrismaClient's isolation level unless the route sets one, nests as
 * savepoints (a batch `$transaction([...])` as well), is run()'s handle too (an extended client's as well), and
 * leaves `newTransaction` and the PrismaClient's own transactions to commit
 * on their own; a PrismaClient whose pool the module cannot reach is
 * refused. The application is in prisma-app.ts.
 */
import { randomUUID } from 'node:crypto';
import {
  IdempotencyConfigurationError,
  IdempotencyService,
} from '../../src/index.js';
import { Barrier, until } from '../utils/barrier.js';
import {
  idleInTransaction,
  PRESENCE_APPLICATION_NAME,
  sessions,
  terminateBackend,
  untilIdleInTransaction,
} from '../utils/sessions.js';
import { onServer } from '../utils/test-database.js';
import type { PrismaTransaction } from '../../src/prisma/index.js';
import type { PaymentsTransaction } from './prisma.fixture.js';
import { Prisma, type PrismaClient } from './prisma/generated/client.js';
import {
  committed,
  gates,
  inTransaction,
  NOTHING,
  post,
  PRISMA_TIMEOUT_MS,
  rowsOf,
  seen,
  startPrismaApp,
  type PrismaApp,
} from './prisma-app.js';

describe('the Prisma adapter', () => {
  let target: PrismaApp;

  beforeAll(async () => {
    target = await startPrismaApp({
      client: {
        transactionOptions: {
          timeout: PRISMA_TIMEOUT_MS,
          isolationLevel: 'RepeatableRead',
        },
      },
    });
  });
  afterAll(() => target?.close());

  it('holds no connection while the handler waits before its first statement, and one transaction after it', async () => {
    const key = randomUUID();
    const answer = post(target, 'parked', { key });
    await gates.beforeFirst.reached();
    expect({
      lent: target.pool.totalCount - target.pool.idleCount,
      waitingForOne: target.pool.waitingCount,
      inTransaction: await idleInTransaction(target.db),
    }).toEqual({ lent: 0, waitingForOne: 0, inTransaction: [] });

    gates.beforeFirst.open();
    await gates.afterFirst.reached();
    // The first statement took a connection and began the transaction:
    // its payment is not visible outside of it yet.
    expect({
      lent: target.pool.totalCount - target.pool.idleCount,
      inTransaction: (await untilIdleInTransaction(target.db, 1)).length,
      payments: (await rowsOf(target, key)).payments,
    }).toEqual({ lent: 1, inTransaction: 1, payments: [] });

    gates.afterFirst.open();
    const response = await answer;
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([1]));
  });

  it("ends the transaction at the module's deadline, before Prisma's own timeout of it: 503, its writes rolled back, its later ones refused", async () => {
    // The handler's first write must be done before its deadline (1 s), for
    // its later one to be tried after it: on a busy machine, a try whose
    // first write took longer is answered the same way (503, nothing
    // written), and the test tries again with a new key.
    for (let attempt = 1; ; attempt += 1) {
      const gate = new Barrier();
      gates.hung = gate;
      seen.lateWrite = undefined;
      const key = randomUUID();
      const answering = post(target, 'hung', { key });
      const first = await Promise.race([
        gate.reached().then(() => 'held' as const),
        answering.then(() => 'answered' as const),
      ]);
      const answer = await answering;
      expect(answer.status).toBe(503);
      expect({
        rows: await rowsOf(target, key),
        inTransaction: await idleInTransaction(target.db),
      }).toEqual({
        rows: NOTHING,
        inTransaction: [],
      });
      gate.open();
      if (first === 'answered' && attempt < 5) {
        continue;
      }
      expect(first).toBe('held');
      await until(
        () => Promise.resolve(seen.lateWrite !== undefined),
        'the late write',
      );
      expect(seen.lateWrite).toBeInstanceOf(Error);
      expect(await rowsOf(target, key)).toEqual(NOTHING);
      return;
    }
  });

  it("keeps the transaction open past Prisma's own timeout, until the handler returns within its deadline", async () => {
    const key = randomUUID();
    const answer = post(target, 'outlived', { key });
    await gates.outlived.reached();
    const [handler] = await untilIdleInTransaction(target.db, 1);
    // An interactive transaction of the application, begun at the same
    // time, with Prisma's own timeout.
    const control = new Barrier();
    let controlPid = 0;
    const controlled = target.prisma.$transaction(async (tx) => {
      [{ pid: controlPid }] = await tx.$queryRaw<
        Array<{ pid: number }>
      >`SELECT pg_backend_pid() AS pid`;
      await control.wait();
      await tx.$queryRaw`SELECT 1`;
    });
    await control.reached();
    // Prisma rolls the application's transaction back at its timeout...
    await until(
      async () => !(await inTransaction(target, controlPid)),
      "Prisma's timeout of the control transaction",
    );
    // ... and leaves the handler's open.
    expect(await inTransaction(target, handler)).toBe(true);
    control.open();
    await expect(controlled).rejects.toThrow(/timeout/i);

    gates.outlived.open();
    const response = await answer;
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([3], [3]));
  });

  it("answers 503 when the database fails the handler's statement on a serialization failure, as on any library: nothing stored, the key free", async () => {
    const key = randomUUID();
    const answers = [
      await post(target, 'conflicting', { key }),
      await post(target, 'conflicting', { key }),
    ];
    expect(answers.map((answer) => answer.status)).toEqual([503, 503]);
    expect(await rowsOf(target, key)).toEqual(NOTHING);
  });

  it('answers 503 when the transaction cannot begin (the server refuses new connections): nothing written', async () => {
    const key = randomUUID();
    const database = new URL(target.db.url).pathname.slice(1);
    const answer = post(target, 'refused', { key });
    await gates.refused.reached();
    // The handler, claimed and holding nothing, waits before its first
    // statement while the database stops accepting connections and the
    // pooled ones end (the presence session stays).
    await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
    try {
      for (const session of await sessions(target.db)) {
        if (session.applicationName !== PRESENCE_APPLICATION_NAME) {
          await terminateBackend(target.db, session.pid);
        }
      }
      gates.refused.open();
      expect((await answer).status).toBe(503);
    } finally {
      await onServer(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
    }
    expect((await rowsOf(target, key)).payments).toEqual([]);
  });

  it("begins the handler's transaction at the PrismaClient's isolation level, or at the route's", async () => {
    const levels = await Promise.all(
      ['level', 'serializable'].map(async (path) => {
        const response = await post(target, path, { key: randomUUID() });
        return { status: response.status, body: await response.json() };
      }),
    );
    expect(levels).toEqual([
      { status: 201, body: { level: 'repeatable read' } },
      { status: 201, body: { level: 'serializable' } },
    ]);
  });

  it.each([
    ['commits with the handler', 'savepoint', [4]],
    ['rolls back to its savepoint alone', 'failed-savepoint', []],
    ["commits with the handler, at the handler's level", 'same-level', [4]],
  ] as const)(
    "runs a nested $transaction as a savepoint of the handler's transaction, which %s",
    async (_what, how, ledger) => {
      const key = randomUUID();
      seen.nested = undefined;
      const response = await post(target, 'nested', { key, how });
      expect(response.status).toBe(201);
      expect(await rowsOf(target, key)).toEqual(committed([4], ledger));
      expect((seen.nested as Error | undefined)?.message).toBe(
        how === 'failed-savepoint'
          ? 'the nested transaction failed'
          : undefined,
      );
    },
  );

  it("refuses a nested $transaction at another isolation level than the handler's, which a savepoint cannot change, before it runs", async () => {
    const key = randomUUID();
    seen.nested = undefined;
    const response = await post(target, 'nested', { key, how: 'other-level' });
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([4], []));
    expect(seen.nested).toBeInstanceOf(IdempotencyConfigurationError);
    expect((seen.nested as Error).message).toMatch(
      /asked for isolation level Serializable, but it joins the handler's transaction \(as a savepoint\), which runs at REPEATABLE READ/,
    );
  });

  it.each([
    ['a model query and a raw one of the handle', 'batch'],
    ["the same at the handler's isolation level, said", 'same-level'],
    ['a raw statement that inserts', 'raw'],
    ["the PrismaClient's own query", 'client'],
    ['the handle of a nested $transaction(fn)', 'inner'],
  ] as const)(
    "runs a batch $transaction([...]) of %s in the handler's transaction: a failed attempt leaves nothing, the one that succeeds commits it once",
    async (_what, how) => {
      const key = randomUUID();
      const attempts = [];
      for (let i = 0; i < 4; i++) {
        const response = await post(target, 'batch', { key, how });
        attempts.push({
          status: response.status,
          replayed: response.headers.get('idempotent-replayed'),
          body: response.ok ? await response.json() : undefined,
          rows: await rowsOf(target, key),
        });
      }
      const answered = {
        status: 201,
        body: { written: how === 'raw' ? 1 : 9, sameConnection: true },
        rows: committed([9]),
      };
      expect(attempts).toEqual([
        { status: 503, replayed: null, body: undefined, rows: NOTHING },
        { status: 503, replayed: null, body: undefined, rows: NOTHING },
        { ...answered, replayed: null },
        { ...answered, replayed: 'true' },
      ]);
    },
  );

  it("rolls a failed batch $transaction([...]) back alone, as a savepoint of the handler's transaction, which goes on", async () => {
    const key = randomUUID();
    seen.batch = undefined;
    const response = await post(target, 'failed-batch', { key });
    expect(response.status).toBe(201);
    expect(await rowsOf(target, key)).toEqual(committed([10], [11]));
    expect((seen.batch as Error | undefined)?.message).toMatch(
      /the batch failed/,
    );
  });

  it('runs the queries of a batch $transaction([...]) in order, and answers their results in order', async () => {
    const key = randomUUID();
    const response = await post(target, 'failed-batch', {
      key,
      how: 'ordered',
    });
    expect({
      status: response.status,
      body: await response.json(),
      rows: await rowsOf(target, key),
    }).toEqual({
      status: 201,
      body: { results: [1, 2, 2] },
      rows: committed([10], [1, 2]),
    });
  });

  it("commits the PrismaClient's own transactions on their own, whatever becomes of the handler's", async () => {
    const key = randomUUID();
    const response = await post(target, 'nested', { key, how: 'client' });
    expect(response.status).toBe(500);
    expect({
      handler: await rowsOf(target, key),
      outside: (await rowsOf(target, `outside:${key}`)).payments,
    }).toEqual({
      handler: NOTHING,
      outside: [4],
    });
  });

  it("refuses a query of the handle in the PrismaClient's own batch $transaction([...]), before it runs apart from the record", async () => {
    const key = randomUUID();
    seen.nested = undefined;
    const response = await post(target, 'nested', {
      key,
      how: 'client-batch',
    });
    expect(response.status).toBe(500);
    expect(await rowsOf(target, key)).toEqual(NOTHING);
    expect(seen.nested).toBeInstanceOf(IdempotencyConfigurationError);
    expect((seen.nested as Error).message).toMatch(
      /given to a batch \$transaction\(\[\.\.\.\]\) of the PrismaClient itself/,
    );
  });

  it("runs IdempotencyService.run()'s function in the transaction, on Prisma's handle, once", async () => {
    const key = randomUUID();
    const service = target.app.get(IdempotencyService);
    const pay = () =>
      service.run({ key }, async (tx: PaymentsTransaction) => {
        const { id } = await tx.payment.create({ data: { key, amount: 8 } });
        return { id };
      });
    const first = await pay();
    expect(await pay()).toEqual(first);
    expect(await rowsOf(target, key)).toEqual(committed([8]));
  });

  it("commits newTransaction's writes on their own, at its isolation level, when the handler fails", async () => {
    const key = randomUUID();
    const response = await post(target, 'audited', { key });
    expect(response.status).toBe(500);
    expect({
      handler: (await rowsOf(target, key)).payments,
      audit: (await rowsOf(target, `audit:${key}:serializable`)).payments,
    }).toEqual({ handler: [], audit: [0] });
  });
});

/** A result extension of the payments: what an extended client adds. */
const doubled = Prisma.defineExtension({
  result: {
    payment: {
      doubled: {
        needs: { amount: true },
        compute: (payment: { amount: number }) => payment.amount * 2,
      },
    },
  },
});
const extend = (prisma: PrismaClient) => prisma.$extends(doubled);

describe('the Prisma adapter on an extended PrismaClient', () => {
  it("hands over the extended client's transaction, typed as it", async () => {
    const target = await startPrismaApp({ extend });
    try {
      const key = randomUUID();
      const result = await target.app
        .get(IdempotencyService)
        .run(
          { key },
          async (tx: PrismaTransaction<ReturnType<typeof extend>>) => {
            const payment = await tx.payment.create({
              data: { key, amount: 21 },
            });
            return { doubled: payment.doubled };
          },
        );
      expect(result).toEqual({ doubled: 42 });
      expect(await rowsOf(target, key)).toEqual(committed([21]));
    } finally {
      await target.close();
    }
  });

  it("runs a batch $transaction([...]) of the extended client's handle in the transaction, with the extension's results", async () => {
    const target = await startPrismaApp({ extend });
    try {
      const key = randomUUID();
      const pay = (fail: boolean) =>
        target.app
          .get(IdempotencyService)
          .run(
            { key },
            async (tx: PrismaTransaction<ReturnType<typeof extend>>) => {
              const [first, second] = await tx.$transaction([
                tx.payment.create({ data: { key, amount: 21 } }),
                tx.payment.create({ data: { key, amount: 22 } }),
              ]);
              if (fail) {
                throw new Error('the gateway is down');
              }
              return { doubled: [first.doubled, second.doubled] };
            },
          );
      await expect(pay(true)).rejects.toThrow('the gateway is down');
      expect(await rowsOf(target, key)).toEqual(NOTHING);
      expect(await pay(false)).toEqual({ doubled: [42, 44] });
      expect(await rowsOf(target, key)).toEqual(committed([21, 22]));
    } finally {
      await target.close();
    }
  });
});

describe('the Prisma adapter on a PrismaClient whose pool it cannot reach', () => {
  it('refuses to start when PrismaPg was given settings instead of a pool', async () => {
    await expect(startPrismaApp({ settingsOnly: true })).rejects.toThrow(
      'The idempotency module found no pg Pool under the PrismaClient',
    );
  });

  it("answers 503 before the handler runs when told another pool than PrismaPg's: Prisma's transaction rolled back, nothing stored", async () => {
    const target = await startPrismaApp({ otherPool: true });
    try {
      const key = randomUUID();
      const response = await post(target, 'level', { key });
      expect(response.status).toBe(503);
      // The module refuses the transaction as Prisma hands it over and
      // answers at once; Prisma's rollback of it, on its own connection,
      // may reach the server just after: it ends, with nothing stored.
      expect({
        inTransaction: await untilIdleInTransaction(target.db, 0),
        rows: await rowsOf(target, key),
      }).toEqual({
        inTransaction: [],
        rows: NOTHING,
      });
    } finally {
      await target.close();
    }
  });
});
