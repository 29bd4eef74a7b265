import {
  IdempotentClient,
  type FetchFunction,
  type IdempotentClientOptions,
  type IdempotentResult,
} from '../../src/client/index.js';
import { HeldGateway } from '../faults/held-gateway.js';
import {
  countRows,
  paymentFor,
  startInstances,
} from '../faults/payments-load.js';
import { Barrier } from '../utils/barrier.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { HttpRequestFaults } from '../utils/http-request-faults.js';
import { startSample, type SampleProcess } from '../utils/sample-process.js';
import {
  createTestDatabase,
  type TestDatabase,
} from '../utils/test-database.js';

/*
 * The caller's client against the compiled sample app: instances of it on
 * one database, each behind an HTTP proxy that can lose a request before
 * the app reads it or lose the app's answer once it took effect. The client
 * sends `POST /payments` operations while answers are lost and while
 * instances are killed (SIGKILL) and restarted; each operation ends with
 * exactly one payment row.
 *
 * Needs `npm run build && npm run build:sample` first (`npm test` does).
 */

/** A running instance of the sample app and the proxy in front of it. */
interface Instance {
  readonly app: SampleProcess;
  readonly proxy: HttpRequestFaults;
}

/** The base URL the client is given; the fetch of each test routes it. */
const API = 'http://payments.internal';

/** Generous: the attempts held at the gateway wait for instances to start. */
const PATIENT: IdempotentClientOptions = {
  attempts: 30,
  attemptTimeoutMs: 60_000,
  deadlineMs: 120_000,
};

let db: TestDatabase;
let gateway: FakeGateway;
let held: HeldGateway;
let env: Record<string, string>;
const instances: Instance[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  gateway = await new FakeGateway().start();
  held = await new HeldGateway(gateway).start();
  held.barrier.open();
  env = { DATABASE_URL: db.url, GATEWAY_URL: held.url };
  for (const app of await startInstances(2, env)) {
    instances.push(await behindProxy(app));
  }
}, 60_000);
afterAll(async () => {
  for (const { app, proxy } of instances) {
    await app.stop();
    await proxy.stop();
  }
  await held?.stop();
  await gateway?.stop();
  await db?.drop();
});

async function behindProxy(app: SampleProcess): Promise<Instance> {
  return { app, proxy: await new HttpRequestFaults(app.url).start() };
}

/** A fetch that sends every request for {@link API} to `target()`'s proxy. */
function routedTo(target: () => Instance): FetchFunction {
  return (input, init) =>
    fetch(`${target().proxy.url}${new URL(input).pathname}`, init);
}

/** Sends the payment of `label` (its body from `paymentFor`) through `client`. */
async function pay(
  client: IdempotentClient,
  label: string,
  key?: string,
): Promise<IdempotentResult & { readonly body: string }> {
  const result = await client.send(`${API}/payments`, {
    key,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(paymentFor(label)),
  });
  return { ...result, body: await result.response.text() };
}

/** Whether `body`, a request's, is the payment of `label`. */
const isPaymentOf = (label: string) => (view: { body: Buffer }) =>
  view.body.toString() === JSON.stringify(paymentFor(label));

/**
 * Each operation (by label) has exactly one payment, the one its answer
 * names, and its key's record, completed, stores that answer.
 */
async function expectOnePaymentEach(
  results: ReadonlyMap<string, { readonly key: string; readonly body: string }>,
) {
  for (const [label, { key, body }] of results) {
    const rows = await db.query<{ id: string; amount: number }>(
      'SELECT id, amount FROM payments WHERE merchant_id = $1',
      [`m_${label}`],
    );
    const answered = JSON.parse(body) as { id: string; amount: number };
    const records = await db.query<{ status: string; body: Buffer }>(
      'SELECT status, response_body AS body FROM idempotency_records WHERE key = $1',
      [key],
    );
    expect({
      label,
      rows,
      records: records.map((record) => ({
        status: record.status,
        body: record.body.toString(),
      })),
    }).toEqual({
      label,
      rows: [{ id: answered.id, amount: paymentFor(label).amount }],
      records: [{ status: 'completed', body }],
    });
  }
}

describe('the client of POST /payments', () => {
  const done = new Map<string, IdempotentResult & { readonly body: string }>();

  it('gets one payment per operation when a request or its answer is lost', async () => {
    const cases = instances.flatMap((instance, i) => [
      { label: `lost-answer-${i}-a`, instance, timing: 'after' as const },
      { label: `lost-answer-${i}-b`, instance, timing: 'after' as const },
      { label: `lost-request-${i}-a`, instance, timing: 'before' as const },
      { label: `lost-request-${i}-b`, instance, timing: 'before' as const },
      { label: `plain-${i}`, instance, timing: undefined },
    ]);
    const faults = cases.map(({ label, instance, timing }) =>
      timing
        ? instance.proxy.arm({ matches: isPaymentOf(label), timing })
        : undefined,
    );
    const results = await Promise.all(
      cases.map(({ label, instance }) =>
        pay(new IdempotentClient({ fetch: routedTo(() => instance) }), label),
      ),
    );
    expect(faults.map((fault) => fault?.hit)).toEqual(
      cases.map(({ timing }) => (timing ? true : undefined)),
    );
    expect(
      results.map(({ response, replayed, attempts }, i) => ({
        label: cases[i].label,
        status: response.status,
        replayed,
        attempts,
      })),
    ).toEqual(
      cases.map(({ label, timing }) => ({
        label,
        status: 201,
        // The answer lost took effect: the retry gets it back, replayed.
        replayed: timing === 'after',
        attempts: timing ? 2 : 1,
      })),
    );
    cases.forEach(({ label }, i) => done.set(label, results[i]));
    await expectOnePaymentEach(done);
  });

  it('gets one payment per operation while every instance is killed and restarted', async () => {
    const labels = Array.from({ length: 12 }, (_, i) => `killed-${i}`);
    const live = [...instances];
    let turn = 0;
    const client = new IdempotentClient({
      ...PATIENT,
      // A load balancer: each attempt goes to the next live instance.
      fetch: routedTo(() => live[turn++ % live.length]),
    });
    held.barrier = new Barrier();
    const sent = Promise.all(labels.map((label) => pay(client, label)));
    // Every payment is inside its handler on one of the two instances,
    // its charge held at the gateway.
    await held.barrier.reached(labels.length);

    for (const victim of [...instances]) {
      live.splice(live.indexOf(victim), 1);
      expect(await victim.app.stop('SIGKILL')).toEqual({
        code: null,
        signal: 'SIGKILL',
      });
      await victim.proxy.stop();
      const restarted = await behindProxy(await startSample(env));
      instances.splice(instances.indexOf(victim), 1, restarted);
      live.push(restarted);
    }
    held.barrier.open();
    const results = await sent;

    expect(
      results.map(({ response, replayed }, i) => ({
        label: labels[i],
        status: response.status,
        replayed,
      })),
    ).toEqual(labels.map((label) => ({ label, status: 201, replayed: false })));
    // Each went through the kill of its instance at least.
    expect(results.filter(({ attempts }) => attempts < 2)).toEqual([]);
    labels.forEach((label, i) => done.set(label, results[i]));
    await expectOnePaymentEach(done);
    console.log(
      `client against the sample app: ${labels.length} payments through two SIGKILLs and restarts, ` +
        `attempts ${results.map(({ attempts }) => attempts).join('/')}; ` +
        `${await countRows(db, 'SELECT 1 FROM payments')} payments, ${gateway.chargeCount} charges`,
    );
  });

  it('replays each operation sent again under its key, and the database holds one payment each', async () => {
    const client = new IdempotentClient({
      fetch: routedTo(() => instances[0]),
    });
    for (const [label, first] of done) {
      const again = await pay(client, label, first.key);
      expect({
        label,
        status: again.response.status,
        replayed: again.replayed,
        attempts: again.attempts,
        body: again.body,
      }).toEqual({
        label,
        status: 201,
        replayed: true,
        attempts: 1,
        body: first.body,
      });
    }
    expect({
      payments: await countRows(db, 'SELECT 1 FROM payments'),
      ledgerEntries: await countRows(db, 'SELECT 1 FROM ledger_entries'),
      completed: await countRows(
        db,
        `SELECT 1 FROM idempotency_records WHERE status = 'completed'`,
      ),
      records: await countRows(db, 'SELECT 1 FROM idempotency_records'),
      steps: await countRows(db, 'SELECT 1 FROM idempotency_steps'),
      charges: gateway.chargeCount,
    }).toEqual({
      payments: done.size,
      ledgerEntries: 2 * done.size,
      completed: done.size,
      records: done.size,
      steps: 0,
      charges: done.size,
    });
  });
});
