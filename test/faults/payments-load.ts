import {
  startSample,
  type SampleEntry,
  type SampleProcess,
} from '../utils/sample-process.js';
import { Barrier, until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import type { FakeGateway } from '../utils/fake-gateway.js';
import { fetchResending } from '../utils/http-client.js';
import { inProgress } from '../utils/problems.js';
import type { TestDatabase } from '../utils/test-database.js';
import type { HeldGateway } from './held-gateway.js';

/**
 * Starts `count` instances of the sample app (or of `entry`) with the same
 * environment. The first runs the migrations (`migrationsRun`) alone:
 * instances starting together on a fresh database would race to create the
 * same tables. The others then start in parallel.
 */
export async function startInstances(
  count: number,
  env: Record<string, string>,
  entry?: SampleEntry,
): Promise<SampleProcess[]> {
  const first = await startSample(env, entry);
  const others = await Promise.allSettled(
    Array.from({ length: count - 1 }, () => startSample(env, entry)),
  );
  const started = [
    first,
    ...others.flatMap((result) =>
      result.status === 'fulfilled' ? [result.value] : [],
    ),
  ];
  const failed = others.find((result) => result.status === 'rejected');
  if (failed) {
    await Promise.all(started.map((instance) => instance.stop()));
    throw failed.reason;
  }
  return started;
}

/** One answer of the sample app to `POST /payments`. */
export interface PaymentAnswer {
  readonly key: string;
  /** Index of the instance (in the list of URLs) that answered. */
  readonly instance: number;
  readonly status: number;
  /** Whether it carries `Idempotent-Replayed: true`. */
  readonly replayed: boolean;
  readonly contentType: string | null;
  readonly retryAfter: string | null;
  /** The body, byte for byte. */
  readonly body: Buffer;
  /**
   * How many times it was sent: more than once when a connection was lost
   * before any response, and the client sent it again with the same key and
   * body ({@link fetchResending}).
   */
  readonly attempts: number;
}

/** The body of the payment for `key`: the same for every duplicate of it. */
export function paymentFor(key: string): Record<string, unknown> {
  let amount = 1000;
  for (const char of key) {
    amount = (amount * 31 + char.charCodeAt(0)) % 100_000;
  }
  return { amount: amount + 1, currency: 'EUR', merchantId: `m_${key}` };
}

/**
 * Sends `POST /payments` for `key` to the instance at `url`, and sends it
 * again, as a client does, if the connection is lost before any response.
 */
export async function pay(
  url: string,
  key: string,
  instance = 0,
): Promise<PaymentAnswer> {
  const { response, attempts } = await fetchResending(`${url}/payments`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    body: JSON.stringify(paymentFor(key)),
  });
  return {
    key,
    instance,
    status: response.status,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    contentType: response.headers.get('content-type'),
    retryAfter: response.headers.get('retry-after'),
    body: Buffer.from(await response.arrayBuffer()),
    attempts,
  };
}

/**
 * Sends `copies` identical requests for each of `keys`, all at once, spread
 * over the instances at `urls`: copy `c` of key `k` goes to instance
 * `(k + c) % urls.length`, so that every key reaches every instance and every
 * instance sees every wave of new keys.
 */
function sendDuplicates(
  urls: readonly string[],
  keys: readonly string[],
  copies: number,
  onAnswer: (answer: PaymentAnswer) => void = () => undefined,
): Promise<PaymentAnswer[]> {
  const sent: Array<Promise<PaymentAnswer>> = [];
  for (let copy = 0; copy < copies; copy += 1) {
    keys.forEach((key, k) => {
      const instance = (k + copy) % urls.length;
      sent.push(
        pay(urls[instance], key, instance).then((answer) => {
          onAnswer(answer);
          return answer;
        }),
      );
    });
  }
  return Promise.all(sent);
}

/** What a burst of duplicates produced, as counted by {@link expectExactlyOnce}. */
export interface ExactlyOnceCounts {
  readonly requests: number;
  /** Non-replayed 201s: one per key. */
  readonly executed: number;
  /** Byte-identical replays of the executed answer. */
  readonly replayed: number;
  /** 409 problem+json answers (request in progress). */
  readonly conflicts: number;
  /** Executions per instance, in the order of the URLs. */
  readonly executedPerInstance: number[];
  readonly payments: number;
  readonly ledgerEntries: number;
  /** Charges the gateway made (effects): one per key. */
  readonly charges: number;
  /**
   * Charge calls the gateway received (HTTP requests): one per key or more,
   * as the app sends a call again, with its key, when an attempt times out.
   */
  readonly chargeCalls: number;
  /** Requests sent again after a connection lost before any response. */
  readonly resent: number;
}

const count = async (db: TestDatabase, sql: string, params: unknown[] = []) =>
  (await db.query<{ n: number }>(sql, params))[0].n;

/**
 * Checks the exactly-once promise for a burst of duplicates over `keys`:
 * for each key exactly one non-replayed 201, every other answer a 409
 * (request in progress) or a replay whose body is byte for byte that 201's;
 * exactly one payment (two ledger entries) and one completed record per key,
 * whose stored body is the 201's; one gateway charge per key, the one its
 * payment books, made under the request's derived key; every charge call
 * carrying that key and that request's amount (one call, or more when the
 * app sent it again with its key), and no call under any other key; no step
 * left behind.
 * @returns the counts, for the scenario to print.
 */
export async function expectExactlyOnce(
  db: TestDatabase,
  gateway: FakeGateway,
  keys: readonly string[],
  answers: readonly PaymentAnswer[],
  instances: number,
): Promise<ExactlyOnceCounts> {
  const executedPerInstance: number[] = new Array<number>(instances).fill(0);
  let replayed = 0;
  let conflicts = 0;
  const unexpected: string[] = [];
  const derivedKeys = new Set<string>();
  for (const key of keys) {
    const mine = answers.filter((answer) => answer.key === key);
    const executed = mine.filter(
      (answer) => answer.status === 201 && !answer.replayed,
    );
    expect({ key, executed: executed.length }).toEqual({ key, executed: 1 });
    const original = executed[0];
    executedPerInstance[original.instance] += 1;
    for (const answer of mine) {
      if (answer === original) {
        continue;
      }
      if (answer.status === 409) {
        expect(answer.contentType).toMatch(/^application\/problem\+json/);
        expect(answer.retryAfter).toBe('1');
        expect(JSON.parse(answer.body.toString())).toMatchObject({
          type: 'urn:idempotency:request-in-progress',
          status: 409,
        });
        conflicts += 1;
      } else if (answer.status === 201 && answer.replayed) {
        expect(answer.body.equals(original.body)).toBe(true);
        expect(answer.contentType).toBe(original.contentType);
        replayed += 1;
      } else {
        unexpected.push(
          `${key}@${answer.instance}: ${answer.status} ${answer.body.toString()}`,
        );
      }
    }
    // The row behind the answer is the one the record stores and replays.
    const payment = JSON.parse(original.body.toString()) as {
      id: string;
      amount: number;
      chargeId: string;
    };
    expect(payment.amount).toBe(paymentFor(key).amount);
    expect(
      await count(
        db,
        `SELECT count(*)::int AS n FROM payments WHERE id = $1 AND merchant_id = $2`,
        [payment.id, `m_${key}`],
      ),
    ).toBe(1);
    const [record] = await db.query<{ status: string; body: Buffer }>(
      `SELECT status, response_body AS body FROM idempotency_records WHERE key = $1`,
      [key],
    );
    expect(record.status).toBe('completed');
    expect(record.body.equals(original.body)).toBe(true);
    // One effect per key: the charge under the request's derived key is the
    // one its payment books. The calls of that key are one or more (the
    // app sends a call again, with its key, when an attempt times out), all
    // with this request's charge.
    const derived = await derivedKeyOf(db, key);
    derivedKeys.add(derived);
    expect({ key, charge: gateway.chargeOf(derived)?.id }).toEqual({
      key,
      charge: payment.chargeId,
    });
    const { amount, currency } = paymentFor(key);
    const calls = gateway.received.filter((call) => call.key === derived);
    expect({ key, called: calls.length > 0 }).toEqual({ key, called: true });
    expect(
      calls.map((call) => ({ key, charge: JSON.parse(call.body) as unknown })),
    ).toEqual(calls.map(() => ({ key, charge: { amount, currency } })));
  }
  expect(unexpected).toEqual([]);
  // No call under any other key (nor without one): a call sent again under
  // a key of its own would have been a second charge.
  expect(
    gateway.received.filter(
      (call) => call.key === undefined || !derivedKeys.has(call.key),
    ),
  ).toEqual([]);
  const counts: ExactlyOnceCounts = {
    requests: answers.length,
    executed: executedPerInstance.reduce((sum, n) => sum + n, 0),
    replayed,
    conflicts,
    executedPerInstance,
    payments: await count(db, `SELECT count(*)::int AS n FROM payments`),
    ledgerEntries: await count(
      db,
      `SELECT count(*)::int AS n FROM ledger_entries`,
    ),
    charges: gateway.chargeCount,
    chargeCalls: gateway.received.length,
    resent: answers.filter((answer) => answer.attempts > 1).length,
  };
  expect(counts).toMatchObject({
    executed: keys.length,
    payments: keys.length,
    ledgerEntries: 2 * keys.length,
    charges: keys.length,
  });
  expect(
    await count(db, `SELECT count(*)::int AS n FROM idempotency_records`),
  ).toBe(keys.length);
  expect(
    await count(db, `SELECT count(*)::int AS n FROM idempotency_steps`),
  ).toBe(0);
  return counts;
}

/**
 * The several-instances scenario, its race forced: `copies` duplicates of
 * each of `keys` (new keys) sent at once over `instances`, while the gateway
 * `held` holds every charge. For each key, exactly one request claims it and
 * waits at the gateway; every other copy, on whichever instance, is refused at
 * once with the exact 409. `whileHeld` then looks at what the held requests
 * hold. Once the gateway lets the charges through, each key executes once
 * (201); the same `copies` sent again are byte-identical replays. Then
 * {@link expectExactlyOnce} over both waves.
 * @returns the counts, for the scenario to print.
 */
export async function expectDuplicatesRefusedThenReplayed(
  db: TestDatabase,
  gateway: FakeGateway,
  held: HeldGateway,
  instances: readonly SampleProcess[],
  keys: readonly string[],
  copies: number,
  whileHeld: () => Promise<void> = async () => undefined,
): Promise<ExactlyOnceCounts> {
  const urls = instances.map((instance) => instance.url);
  held.barrier = new Barrier();
  let answered = 0;
  const first = sendDuplicates(urls, keys, copies, () => (answered += 1));
  try {
    await held.barrier.reached(keys.length);
    const refused = keys.length * (copies - 1);
    await until(
      async () => answered === refused,
      `${refused} duplicates to be answered while the first of each key runs`,
    );
    await whileHeld();
  } finally {
    held.barrier.open();
  }
  const firstWave = await first;
  const executed = firstWave.filter((answer) => answer.status === 201);
  expect(executed.map((answer) => answer.key).sort()).toEqual([...keys].sort());
  expect(executed.filter((answer) => answer.replayed)).toEqual([]);
  const refusals = firstWave.filter((answer) => answer.status !== 201);
  expect(
    refusals.map((answer) => ({
      key: answer.key,
      status: answer.status,
      contentType: answer.contentType,
      retryAfter: answer.retryAfter,
      body: JSON.parse(answer.body.toString()) as unknown,
    })),
  ).toEqual(
    refusals.map((answer) => ({
      key: answer.key,
      status: 409,
      contentType: expect.stringMatching(/^application\/problem\+json/),
      retryAfter: '1',
      body: inProgress(answer.key),
    })),
  );
  // Every instance refused duplicates of keys that another one runs.
  expect(new Set(refusals.map((answer) => answer.instance)).size).toBe(
    instances.length,
  );

  // The keep-alive connections of the first wave sat idle while the test
  // waited: one the server closed meanwhile loses the request sent on it
  // before the app reads it, and the client sends it again (same key, same
  // body). The key completed, so a replay is the only answer either attempt
  // may get. (A copy of the first wave sent again gets no more leeway: had
  // its lost attempt executed, its key would lack its non-replayed 201.)
  const secondWave = await sendDuplicates(urls, keys, copies);
  expect(
    secondWave.filter((answer) => answer.status !== 201 || !answer.replayed),
  ).toEqual([]);
  const counts = await expectExactlyOnce(
    db,
    gateway,
    keys,
    [...firstWave, ...secondWave],
    instances.length,
  );
  expect({ conflicts: counts.conflicts, replayed: counts.replayed }).toEqual({
    conflicts: keys.length * (copies - 1),
    replayed: keys.length * copies,
  });
  return counts;
}

/** One compact line of counts, as the scenarios print them. */
export function describeCounts(counts: ExactlyOnceCounts): string {
  return (
    `${counts.requests} requests: ${counts.executed} executed ` +
    `(per instance ${counts.executedPerInstance.join('/')}), ` +
    `${counts.replayed} byte-identical replays, ${counts.conflicts} × 409; ` +
    `${counts.payments} payments, ${counts.ledgerEntries} ledger entries, ` +
    `${counts.charges} gateway charges from ${counts.chargeCalls} charge calls; ` +
    `${counts.resent} requests sent again after a connection lost before any response`
  );
}

/** `SELECT count(*)` of `sql`'s rows on the database of `db`. */
export function countRows(
  db: TestDatabase,
  sql: string,
  params: unknown[] = [],
): Promise<number> {
  return count(db, `SELECT count(*)::int AS n FROM (${sql}) AS rows`, params);
}
