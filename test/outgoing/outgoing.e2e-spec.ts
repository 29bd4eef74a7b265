import { SeededRandom, seedFrom } from '../soak/seeded-random.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { send, startTestApp, type TestApp } from '../utils/test-app.js';
import { PayFaults, outgoingModule } from './outgoing.module.js';
import {
  ScriptedDownstream,
  TRANSIENT_FAULTS,
  type DownstreamFault,
} from './scripted-downstream.js';

/** The options of the calls, unless a test says otherwise: fast retries. */
const FAST = {
  retry: { attempts: 5, baseDelayMs: 5, maxDelayMs: 50 },
  timeoutMs: 1_500,
};

describe('IdempotencyContext.fetch(): outgoing calls as recovery points', () => {
  let downstream: ScriptedDownstream;
  let target: TestApp;
  let faults: PayFaults;

  beforeAll(async () => {
    downstream = await new ScriptedDownstream().start();
    target = await startTestApp({
      imports: [outgoingModule(downstream.url)],
      idempotency: { outgoing: FAST },
    });
    faults = target.app.get(PayFaults);
  });
  afterAll(async () => {
    await target.close();
    await downstream.stop();
  });
  afterEach(() => {
    downstream.retryAfter = 0;
    faults.call = undefined;
  });

  const pay = (key: string, reference: string, extra: object = {}) =>
    send(target, '/pay', {
      key,
      body: { amount: 1250, reference, ...extra },
    });
  const orders = (reference: string) =>
    target.db.query<{ source: string }>(
      'SELECT source FROM orders WHERE reference = $1',
      [reference],
    );
  /** The key of each call made for the order `reference`, in order. */
  const keysOf = (reference: string) =>
    downstream.callsWith(reference).map((call) => call.key);

  it.each<[string, DownstreamFault[]]>([
    ['a dropped connection', ['drop']],
    ['an answer lost after the charge', ['drop-after']],
    ['409, 429 and 503', ['409', '429', '503']],
    ['an attempt that times out', ['hang']],
    ['every transient fault in a row', ['drop-after', 'hang', '503', '409']],
  ])(
    'gets through %s with one charge, every attempt carrying the derived key',
    async (_name, script) => {
      const key = `through-${script.join('-')}`;
      downstream.script(key, ...script);
      const response = await pay(key, key);
      expect(response.status).toBe(201);
      const body = (await response.json()) as { charge: { id: string } };
      expect(body).toEqual({
        orderId: expect.any(Number),
        status: 201,
        charge: { id: expect.stringMatching(/^ch_/), amount: 1250 },
      });
      const derived = await derivedKeyOf(target.db, key);
      const calls = downstream.callsWith(key);
      expect(calls.map((call) => call.outcome)).toEqual([...script, 'charged']);
      expect(calls.map((call) => call.key)).toEqual(calls.map(() => derived));
      expect(downstream.charges.get(derived)).toEqual(body.charge);
      expect(await orders(key)).toEqual([{ source: body.charge.id }]);
    },
  );

  it('reuses the stored answer when the handler is retried: no second call', async () => {
    faults.failAfterCall.add('reuse');
    const failed = await pay('reuse', 'reuse');
    expect(failed.status).toBe(500);
    const derived = await derivedKeyOf(target.db, 'reuse');
    expect(keysOf('reuse')).toEqual([derived]);
    expect(await orders('reuse')).toEqual([]);

    const retried = await pay('reuse', 'reuse');
    expect(retried.status).toBe(201);
    expect(await retried.json()).toEqual({
      orderId: expect.any(Number),
      status: 201,
      charge: { id: downstream.charges.get(derived)!.id, amount: 1250 },
    });
    expect(faults.runs.get('reuse')).toBe(2);
    expect(keysOf('reuse')).toEqual([derived]);
    expect(await derivedKeyOf(target.db, 'reuse')).toBe(derived);
    expect(await orders('reuse')).toHaveLength(1);
  });

  it('answers 503 when no attempt gets through, and the retry calls again with the same key', async () => {
    downstream.script('spent', '503', '503', '503', '503', '503');
    const refused = await pay('spent', 'spent');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('content-type')).toMatch(
      /^application\/problem\+json/,
    );
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await refused.json()).toEqual({
      type: 'urn:idempotency:downstream-unavailable',
      title: 'Downstream service unavailable',
      status: 503,
      detail:
        'A service this request depends on did not answer in time. Retry it with the same idempotency key: it takes effect exactly once.',
    });
    const derived = await derivedKeyOf(target.db, 'spent');
    expect(keysOf('spent')).toEqual(Array(5).fill(derived));
    expect(downstream.charges.has(derived)).toBe(false);
    expect(await orders('spent')).toEqual([]);

    const retried = await pay('spent', 'spent');
    expect(retried.status).toBe(201);
    const { charge } = (await retried.json()) as { charge: { id: string } };
    expect(keysOf('spent')).toEqual(Array(6).fill(derived));
    expect(downstream.charges.get(derived)).toEqual(charge);
    expect(await orders('spent')).toEqual([{ source: charge.id }]);
  });

  it('stops at a final answer: a 400 is a 502 problem, and nothing is stored', async () => {
    downstream.script('declined', '400');
    const refused = await pay('declined', 'declined');
    expect(refused.status).toBe(502);
    expect(await refused.json()).toEqual({
      type: 'urn:idempotency:downstream-refused',
      title: 'Downstream service refused the request',
      status: 502,
      detail: 'A service this request depends on answered 400.',
    });
    const derived = await derivedKeyOf(target.db, 'declined');
    expect(keysOf('declined')).toEqual([derived]);
    expect(downstream.charges.has(derived)).toBe(false);
    // Not stored: the retry calls again (the same key), and gets through.
    const retried = await pay('declined', 'declined');
    expect(retried.status).toBe(201);
    expect(keysOf('declined')).toEqual([derived, derived]);
    expect(downstream.charges.has(derived)).toBe(true);
  });

  it('lets the handler map a refusal to an answer of its own', async () => {
    downstream.script('mapped', '400');
    const mapped = await pay('mapped', 'mapped', { mapRefusal: true });
    expect(mapped.status).toBe(402);
    expect(await mapped.json()).toEqual({
      declined: { error: 'card_declined' },
      status: 400,
    });
  });

  it('does not retry a replayed error: it is the stored outcome of that key', async () => {
    downstream.script('replayed', 'replayed-500');
    const refused = await pay('replayed', 'replayed');
    expect(refused.status).toBe(502);
    expect(keysOf('replayed')).toEqual([
      await derivedKeyOf(target.db, 'replayed'),
    ]);
  });

  it("waits for the answer's Retry-After before sending again", async () => {
    downstream.retryAfter = 1;
    faults.call = { retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 5_000 } };
    downstream.script('patient', '409');
    const response = await pay('patient', 'patient');
    expect(response.status).toBe(201);
    const [conflict, charged] = downstream.callsWith('patient');
    expect(conflict.outcome).toBe('409');
    expect(charged.outcome).toBe('charged');
    const derived = await derivedKeyOf(target.db, 'patient');
    expect([conflict.key, charged.key]).toEqual([derived, derived]);
    // A lower bound only: a busy machine makes the wait longer, not shorter.
    expect(charged.at - conflict.at).toBeGreaterThanOrEqual(990);
  });

  it('gives up at the handler’s deadline, well before its own timeouts', async () => {
    faults.call = { timeoutMs: 60_000, retry: { deadlineMs: 60_000 } };
    downstream.script('late', 'hang');
    const started = performance.now();
    const response = await send(target, '/pay/short', {
      key: 'late',
      body: { amount: 1250, reference: 'late' },
    });
    expect(response.status).toBe(503);
    expect(performance.now() - started).toBeLessThan(30_000);
    const derived = await derivedKeyOf(target.db, 'late');
    expect(keysOf('late')).toEqual([derived]);
    expect(downstream.charges.has(derived)).toBe(false);
  });

  it('refuses a keyless call plainly: the configuration error, nothing sent', async () => {
    const before = downstream.received.length;
    const response = await send(target, '/pay/keyless', {
      body: { amount: 1250, reference: 'keyless' },
    });
    expect(response.status).toBe(500);
    expect(downstream.received).toHaveLength(before);
  });

  it('makes one charge per operation through random faults and handler retries (seeded)', async () => {
    const seed = seedFrom('OUTGOING_SEED');
    const random = new SeededRandom(seed);
    const replay = `replay with OUTGOING_SEED=${seed}`;
    console.log(`outgoing calls: seed ${seed} (${replay})`);
    const operations = Array.from({ length: 12 }, (_, i) => {
      const key = `random-${seed}-${i}`;
      const script = Array.from({ length: random.int(0, 3) }, () =>
        random.pick(TRANSIENT_FAULTS),
      );
      downstream.script(key, ...script);
      const failAfterCall = random.chance(0.3);
      if (failAfterCall) {
        faults.failAfterCall.add(key);
      }
      return { key, script, failAfterCall };
    });
    /** The derived key of each operation, by its key (its reference). */
    const derivedOf = new Map<string, string>();
    await Promise.all(
      operations.map(async ({ key, script, failAfterCall }) => {
        const context = `${key}, script [${script.join(', ')}], failAfterCall ${failAfterCall} (${replay})`;
        const first = await pay(key, key);
        expect({ context, status: first.status }).toEqual({
          context,
          status: failAfterCall ? 500 : 201,
        });
        const derived = await derivedKeyOf(target.db, key);
        derivedOf.set(key, derived);
        expect({ context, keys: keysOf(key) }).toEqual({
          context,
          keys: Array(script.length + 1).fill(derived),
        });
        if (failAfterCall) {
          const retried = await pay(key, key);
          expect({ context, status: retried.status }).toEqual({
            context,
            status: 201,
          });
          // The handler's retry reuses the stored answer.
          expect({ context, keys: keysOf(key) }).toEqual({
            context,
            keys: Array(script.length + 1).fill(derived),
          });
        }
        const charge = downstream.charges.get(derived);
        expect({ context, orders: await orders(key) }).toEqual({
          context,
          orders: [{ source: charge?.id }],
        });
      }),
    );
    // No attempt ever sent a key other than its operation's derived one,
    // and each operation, its own key, was charged once.
    const ours = downstream.received.filter((call) =>
      call.reference?.startsWith(`random-${seed}-`),
    );
    expect(
      ours.filter((call) => call.key !== derivedOf.get(call.reference!)),
    ).toEqual([]);
    const derivedKeys = new Set(derivedOf.values());
    expect(derivedKeys.size).toBe(operations.length);
    expect(
      [...derivedKeys].filter((derived) => !downstream.charges.has(derived)),
    ).toEqual([]);
  });
});
