import { randomUUID } from 'node:crypto';
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
