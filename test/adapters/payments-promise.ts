import { randomUUID } from 'node:crypto';
import { untilAdvisoryLocks } from '../utils/barrier.js';
import type { TestDatabase } from '../utils/test-database.js';
import type { PaymentFault } from './payments.controller.js';

/** A running payments application, wherever it runs. */
export interface PaymentsTarget {
  /** Base URL of its HTTP server. */
  readonly url: string;
  /** Its database. */
  readonly db: TestDatabase;
}

/**
 * The central promise on a payments application (see payments.controller.ts:
 * a payment and two ledger entries per request, and the faults its body
 * asks for): its rows and its idempotency record commit together or not at
 * all, whatever fails and wherever. `target` is read when the tests run.
 */
export function describePaymentsPromise(target: () => PaymentsTarget): void {
  const pay = (key: string, amount: number, fault?: PaymentFault) =>
    fetch(`${target().url}/payments`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': key,
      },
      body: JSON.stringify({ key, amount, fault }),
    });

  /** The rows of `key`: its record's status, payments and ledger entries. */
  async function rowsOf(key: string) {
    const [row] = await target().db.query<{
      record: string | null;
      payments: number;
      ledger: number;
    }>(
      `SELECT (SELECT status FROM idempotency_records WHERE key = $1) AS record,
              (SELECT count(*)::int FROM payments WHERE key = $1) AS payments,
              (SELECT count(*)::int FROM ledger_entries l
                 JOIN payments p ON p.id = l.payment_id WHERE p.key = $1) AS ledger`,
      [key],
    );
    return row;
  }

  it('replays the stored answer byte for byte, and writes once', async () => {
    const key = randomUUID();
    const first = await pay(key, 100);
    const body = Buffer.from(await first.arrayBuffer());
    const again = await pay(key, 100);
    expect({
      status: again.status,
      replayed: again.headers.get('idempotent-replayed'),
      body: Buffer.from(await again.arrayBuffer()),
    }).toEqual({ status: 201, replayed: 'true', body });
    expect(first.status).toBe(201);
    expect(await rowsOf(key)).toEqual({
      record: 'completed',
      payments: 1,
      ledger: 2,
    });
  });

  it('writes one set of rows for ten concurrent duplicates', async () => {
    const key = randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const response = await pay(key, 250);
        return { status: response.status, body: await response.text() };
      }),
    );
    const created = answers.filter((answer) => answer.status === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    expect(new Set(created.map((answer) => answer.body)).size).toBe(1);
    expect(
      answers.filter((answer) => ![201, 409].includes(answer.status)),
    ).toEqual([]);
    expect(await rowsOf(key)).toEqual({
      record: 'completed',
      payments: 1,
      ledger: 2,
    });
  });

  it.each([
    ['the handler throws', 'throw', 500],
    // The handler's own error, which its retry would meet again: not a 503.
    [
      'the handler caught the failure of its own statement and returned',
      'swallowed',
      500,
    ],
    // A failure a retry may not meet: the database's 503, as thrown.
    [
      'the handler caught a deadlock of its own statement and returned',
      'swallowed-deadlock',
      503,
    ],
    ['a deferred constraint fails at COMMIT', 'deferred', 503],
    ['its connection is terminated as the handler returns', 'terminate', 503],
  ] as const)(
    'stores nothing and frees the key at once when %s',
    async (_what, fault, status) => {
      const key = randomUUID();
      const failed = await pay(key, 300, fault);
      expect(failed.status).toBe(status);
      expect(await rowsOf(key)).toEqual({
        record: null,
        payments: 0,
        ledger: 0,
      });
      const retry = await pay(key, 300);
      expect(retry.status).toBe(201);
      expect(await rowsOf(key)).toEqual({
        record: 'completed',
        payments: 1,
        ledger: 2,
      });
    },
  );

  // Without a key there is no completion: the aborted transaction shows
  // first at the COMMIT, which the server answers with a ROLLBACK.
  it.each([
    ['swallowed', 500],
    ['swallowed-deadlock', 503],
  ] as const)(
    'answers a request without a key whose handler caught its failed statement (%s) with %i, and writes nothing',
    async (fault, status) => {
      const key = randomUUID();
      const answer = await fetch(`${target().url}/payments/optional`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ key, amount: 310, fault }),
      });
      expect(answer.status).toBe(status);
      expect(await rowsOf(key)).toEqual({
        record: null,
        payments: 0,
        ledger: 0,
      });
    },
  );

  // An error answer the route stores (storeErrors) is the key's outcome
  // only when nothing the handler wrote can have committed without it.
  it.each([
    ['SELECT 1', '', 400, 'failed', 0],
    ['SELECT 1 / 0', '', 400, 'failed', 0],
    ['COMMIT', '', 503, null, 1],
    ['COMMIT AND CHAIN', '', 503, null, 1],
    ['ROLLBACK AND CHAIN', '', 503, null, 0],
    // The chained transaction aborted: the server cannot tell any more.
    ['COMMIT AND CHAIN', 'SELECT 1 / 0', 503, null, 1],
  ] as const)(
    'after `%s` (then `%s`) sent by hand, answers a rejection the route stores with %i, record %s, payments %i',
    async (end, then, status, record, payments) => {
      const key = randomUUID();
      const reject = () =>
        fetch(`${target().url}/payments/rejected`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'idempotency-key': key,
          },
          body: JSON.stringify({ key, end, then }),
        });
      const answer = await reject();
      expect(answer.status).toBe(status);
      expect(await rowsOf(key)).toEqual({ record, payments, ledger: 0 });
      const retry = await reject();
      expect({
        status: retry.status,
        replayed: retry.headers.get('idempotent-replayed'),
      }).toEqual({ status, replayed: record ? 'true' : null });
    },
  );

  /** The advisory lock the test holds while a request must meet a failure. */
  const HELD = 7_324_001;

  /** Sends a rejection the route stores (see payments.controller.ts). */
  const reject = (body: { key: string; end: string; then?: string }) =>
    fetch(`${target().url}/payments/rejected`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': body.key,
      },
      body: JSON.stringify(body),
    });

  /** What a client reads of an answer: its status, and the module's marks. */
  const answerOf = async (answer: Response) => ({
    status: answer.status,
    retryAfter: answer.headers.get('retry-after'),
    replayed: answer.headers.get('idempotent-replayed'),
    type: ((await answer.json()) as { type?: string }).type,
  });

  /** The answer of a key's retry once the failure is gone: the handler runs. */
  const RAN = {
    status: 400,
    retryAfter: null,
    replayed: null,
    type: undefined,
  };

  // A failure that a retry may not meet, which the handler caught and
  // answered with an error the route stores: that error is not the key's
  // outcome. The client gets a 503, nothing is stored, and the retry runs.
  // Each failure is met only while the test holds its advisory lock.
  it.each([
    [
      'a serialization failure (40001)',
      'SELECT 1',
      `DO $$ BEGIN IF NOT pg_try_advisory_xact_lock(${HELD}) THEN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END IF; END $$`,
    ],
    [
      'a lock timeout (55P03)',
      "SET LOCAL lock_timeout = '20ms'",
      `SELECT pg_advisory_xact_lock(${HELD})`,
    ],
    [
      'a statement timeout (57014)',
      "SET LOCAL statement_timeout = '20ms'",
      `SELECT pg_advisory_xact_lock(${HELD})`,
    ],
  ] as const)(
    'answers 503 and stores nothing when the handler caught %s and rejected the request, and its retry runs',
    async (_what, end, then) => {
      const key = randomUUID();
      const { db } = target();
      await db.query('SELECT pg_advisory_lock($1)', [HELD]);
      let answer: Response;
      try {
        answer = await reject({ key, end, then });
      } finally {
        await db.query('SELECT pg_advisory_unlock($1)', [HELD]);
      }
      expect(await answerOf(answer)).toEqual({
        status: 503,
        retryAfter: '1',
        replayed: null,
        type: 'urn:idempotency:unavailable',
      });
      expect(await rowsOf(key)).toEqual({
        record: null,
        payments: 0,
        ledger: 0,
      });
      expect(await answerOf(await reject({ key, end, then }))).toEqual(RAN);
      expect(await rowsOf(key)).toEqual({
        record: 'failed',
        payments: 0,
        ledger: 0,
      });
      expect(await answerOf(await reject({ key, end, then }))).toEqual({
        ...RAN,
        replayed: 'true',
      });
    },
  );

  it('answers 503 and stores nothing for the loser of a deadlock that its handler caught before rejecting the request, and its retry runs', async () => {
    const { db } = target();
    const [from, to] = await db.query<{ id: number }>(
      `INSERT INTO payments (key, amount) VALUES ($1, 0), ($1, 0) RETURNING id`,
      [`accounts-${randomUUID()}`],
    );
    // Each request locks one account, waits until the test lets both go
    // on, and then updates the other: a deadlock, which PostgreSQL ends by
    // aborting one of the two transactions.
    const transfer = (first: number, second: number) => ({
      key: randomUUID(),
      end: `DO $$ BEGIN UPDATE payments SET amount = amount - 1 WHERE id = ${first}; PERFORM pg_advisory_xact_lock_shared(${HELD}); END $$`,
      then: `UPDATE payments SET amount = amount + 1 WHERE id = ${second}`,
    });
    const bodies = [transfer(from.id, to.id), transfer(to.id, from.id)];
    await db.query('SELECT pg_advisory_lock($1)', [HELD]);
    let sent: Promise<Response>[];
    try {
      sent = bodies.map(reject);
      await untilAdvisoryLocks(db, 'waiting', 2);
    } finally {
      await db.query('SELECT pg_advisory_unlock($1)', [HELD]);
    }
    const answers = await Promise.all((await Promise.all(sent)).map(answerOf));
    // The winner's rejection is the key's outcome; the loser's is not.
    const loser = answers.findIndex((answer) => answer.status === 503);
    expect(answers[loser]).toEqual({
      status: 503,
      retryAfter: '1',
      replayed: null,
      type: 'urn:idempotency:unavailable',
    });
    expect(answers[1 - loser]).toEqual(RAN);
    const { key } = bodies[loser];
    expect(await rowsOf(bodies[1 - loser].key)).toEqual({
      record: 'failed',
      payments: 0,
      ledger: 0,
    });
    expect(await rowsOf(key)).toEqual({
      record: null,
      payments: 0,
      ledger: 0,
    });
    expect(await answerOf(await reject(bodies[loser]))).toEqual(RAN);
    expect(await rowsOf(key)).toEqual({
      record: 'failed',
      payments: 0,
      ledger: 0,
    });
    expect(
      await db.query('SELECT amount FROM payments WHERE id IN ($1, $2)', [
        from.id,
        to.id,
      ]),
    ).toEqual([{ amount: 0 }, { amount: 0 }]);
  });

  it('answers 503 and stores nothing when a COMMIT sent by hand ends the transaction underneath', async () => {
    const key = randomUUID();
    const answer = await pay(key, 400, 'commit');
    expect(answer.status).toBe(503);
    // The payment committed with the COMMIT sent by hand; nothing after
    // it ran, and no record says the request was done.
    expect(await rowsOf(key)).toEqual({
      record: null,
      payments: 1,
      ledger: 0,
    });
  });

  it.each([
    ['COMMIT AND CHAIN', 'commit-chain', 1],
    ['COMMIT; BEGIN in one query', 'commit-begin', 1],
    ['ROLLBACK AND CHAIN', 'rollback-chain', 0],
  ] as const)(
    'answers 503 and stores nothing when %s, sent by hand, ends the transaction and begins another',
    async (_what, fault, payments) => {
      const key = randomUUID();
      const answer = await pay(key, 500, fault);
      expect(answer.status).toBe(503);
      // The session is in a transaction again, but not the module's: the
      // record never commits in it, without the payment or without its
      // ledger entries.
      expect(await rowsOf(key)).toEqual({ record: null, payments, ledger: 0 });
      // The key is free at once.
      expect((await pay(key, 500)).status).toBe(201);
      expect(await rowsOf(key)).toEqual({
        record: 'completed',
        payments: payments + 1,
        ledger: 2,
      });
    },
  );

  it.each(['savepoint-open', 'savepoint-open-commented'] as const)(
    'answers 503, commits nothing and frees the key at once when the handler returns with a savepoint still open (%s)',
    async (fault) => {
      const key = randomUUID();
      const answer = await pay(key, 600, fault);
      expect(answer.status).toBe(503);
      // Not the payment without its ledger entries, nor both without the
      // end of the nested work: nothing.
      expect(await rowsOf(key)).toEqual({
        record: null,
        payments: 0,
        ledger: 0,
      });
      expect((await pay(key, 600)).status).toBe(201);
      expect(await rowsOf(key)).toEqual({
        record: 'completed',
        payments: 1,
        ledger: 2,
      });
    },
  );

  it.each([
    ['released', 'savepoint-released', 2],
    ['released, after comments,', 'savepoint-released-commented', 2],
    ['rolled back to', 'savepoint-rolled-back', 0],
  ] as const)(
    'commits a savepoint the handler %s before it returns',
    async (_what, fault, ledger) => {
      const key = randomUUID();
      const answer = await pay(key, 700, fault);
      expect(answer.status).toBe(201);
      expect(await rowsOf(key)).toEqual({
        record: 'completed',
        payments: 1,
        ledger,
      });
    },
  );

  it("completes in the handler's transaction after the handler set its search_path to a schema without the module's tables", async () => {
    const key = randomUUID();
    const answer = await pay(key, 800, 'search-path');
    expect(answer.status).toBe(201);
    expect(await rowsOf(key)).toEqual({
      record: 'completed',
      payments: 1,
      ledger: 2,
    });
    const again = await pay(key, 800, 'search-path');
    expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([
      201,
      'true',
    ]);
  });
}
