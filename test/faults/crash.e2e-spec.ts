import {
  startSample,
  TUNED_SAMPLE,
  type SampleProcess,
} from '../utils/sample-process.js';
import { until } from '../utils/barrier.js';
import { derivedKeyOf } from '../utils/derived-keys.js';
import { FakeGateway } from '../utils/fake-gateway.js';
import { lockWaiters, presenceBackend } from '../utils/sessions.js';
import {
  createTestDatabase,
  holdInTransaction,
  type TestDatabase,
} from '../utils/test-database.js';
import { countRows, pay, type PaymentAnswer } from './payments-load.js';

/** Requests inside the handler when the instance is killed. */
const IN_FLIGHT = 20;
/**
 * Each handler holds a connection for its transaction (it waits on the
 * payments table, inside it); one more serves claims, steps and renewals.
 */
const POOL_SIZE = IN_FLIGHT + 1;

let db: TestDatabase;
let gateway: FakeGateway;
/** The instance killed with requests inside its handler. */
let victim: SampleProcess | undefined;
/** Another instance, which takes the retries. */
let survivor: Promise<SampleProcess> | undefined;

// Each scenario has a database and a gateway of its own.
beforeEach(async () => {
  db = await createTestDatabase();
  gateway = await new FakeGateway().start();
});
afterEach(async () => {
  await victim?.stop();
  await survivor?.then(
    (instance) => instance.stop(),
    () => undefined,
  );
  victim = survivor = undefined;
  await gateway?.stop();
  await db?.drop();
});

/**
 * The environment of the victim and the survivor: the scenario's database
 * and gateway, a pool of `POOL_SIZE` connections, and `extra`.
 */
function sampleEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    GATEWAY_URL: gateway.url,
    DATABASE_POOL_SIZE: String(POOL_SIZE),
    ...extra,
  };
}

interface Crash {
  readonly db: TestDatabase;
  readonly gateway: FakeGateway;
  readonly keys: readonly string[];
  /** The killed instance's id (its records' `owner_instance`), if it had one. */
  readonly instance: string | null;
  /** Records the killed attempts left, as the retries find them. */
  readonly afterKill: Record<string, number>;
}

/**
 * Starts the victim, holds the payments table so that each of `keys` stops
 * inside its handler's transaction after its charge step, kills the victim
 * (SIGKILL) and waits until the server has ended all of its sessions.
 */
async function crashWithRequestsInside(
  db: TestDatabase,
  gateway: FakeGateway,
  victim: SampleProcess,
  keys: readonly string[],
): Promise<Crash> {
  const holder = await holdInTransaction(
    db.url,
    'LOCK TABLE payments IN ACCESS EXCLUSIVE MODE',
  );
  const killed = keys.map((key) =>
    pay(victim.url, key).catch((error: unknown) => error),
  );
  await until(
    async () => (await lockWaiters(db, 'payments')).length === keys.length,
    `${keys.length} handlers to wait on the payments table`,
  );
  expect(await countRows(db, 'SELECT 1 FROM idempotency_steps')).toBe(
    keys.length,
  );
  const [{ instance, instances }] = await db.query<{
    instance: string | null;
    instances: number;
  }>(
    `SELECT min(owner_instance::text) AS instance,
            count(DISTINCT owner_instance)::int AS instances
     FROM idempotency_records WHERE status = 'in_progress'`,
  );
  const victimPids = await lockWaiters(db, 'payments');
  const presence = instance ? await presenceBackend(db, instance) : undefined;
  if (presence) {
    victimPids.push(presence.pid);
  }

  expect(await victim.stop('SIGKILL')).toEqual({
    code: null,
    signal: 'SIGKILL',
  });
  // No client got an answer: each will retry.
  const outcomes = await Promise.all(killed);
  expect(outcomes.map((outcome) => String(outcome))).toEqual(
    keys.map(() => expect.stringMatching(/fetch failed/)),
  );
  await holder.release();
  // The server rolls the dead sessions back and ends them, the presence
  // session (if any) with them.
  await until(
    async () =>
      (await countRows(
        db,
        'SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])',
        [victimPids],
      )) === 0,
    "the killed instance's sessions to end",
  );
  const afterKill = {
    payments: await countRows(db, 'SELECT 1 FROM payments'),
    ledgerEntries: await countRows(db, 'SELECT 1 FROM ledger_entries'),
    claims: await countRows(
      db,
      `SELECT 1 FROM idempotency_records WHERE status = 'in_progress'`,
    ),
    unowned: await countRows(
      db,
      `SELECT 1 FROM idempotency_records
       WHERE status = 'in_progress' AND owner_instance IS NULL`,
    ),
    unexpiredLeases: await countRows(
      db,
      `SELECT 1 FROM idempotency_records
       WHERE status = 'in_progress' AND lease_expires_at > now()`,
    ),
    steps: await countRows(db, 'SELECT 1 FROM idempotency_steps'),
    instances,
  };
  expect(gateway.chargeCount).toBe(keys.length);
  return { db, gateway, keys, instance, afterKill };
}

/**
 * Each key executed exactly once (by a retry that reused the charge step),
 * and a duplicate of each replays it byte for byte.
 */
async function expectExecutedOnce(
  { db, gateway, keys }: Crash,
  retries: readonly PaymentAnswer[],
  url: string,
) {
  expect(
    retries.map(({ key, status, replayed }) => ({ key, status, replayed })),
  ).toEqual(keys.map((key) => ({ key, status: 201, replayed: false })));
  for (const key of keys) {
    expect({
      key,
      payments: await countRows(
        db,
        'SELECT 1 FROM payments WHERE merchant_id = $1',
        [`m_${key}`],
      ),
      // Charged under the request's derived key (a call sent again with it
      // charges nothing more: the total below counts the charges).
      charged: gateway.chargeOf(await derivedKeyOf(db, key)) !== undefined,
    }).toEqual({ key, payments: 1, charged: true });
  }
  const duplicates = await Promise.all(keys.map((key) => pay(url, key)));
  duplicates.forEach((duplicate, i) => {
    expect(duplicate.replayed).toBe(true);
    expect(duplicate.body.equals(retries[i].body)).toBe(true);
  });
  const final = {
    payments: await countRows(db, 'SELECT 1 FROM payments'),
    ledgerEntries: await countRows(db, 'SELECT 1 FROM ledger_entries'),
    records: await countRows(
      db,
      `SELECT 1 FROM idempotency_records WHERE status = 'completed'`,
    ),
    steps: await countRows(db, 'SELECT 1 FROM idempotency_steps'),
    charges: gateway.chargeCount,
  };
  expect(final).toEqual({
    payments: keys.length,
    ledgerEntries: 2 * keys.length,
    records: keys.length,
    steps: 0,
    charges: keys.length,
  });
  return { final, replays: duplicates.filter((d) => d.replayed).length };
}

describe('an instance of the sample app killed with requests inside the handler', () => {
  it(`leaves no payment and no stuck key: its presence gone, each of the ${IN_FLIGHT} retries on another instance executes once, at once`, async () => {
    const env = sampleEnv();
    victim = await startSample(env);
    // Another instance takes the retries; it starts while the first is
    // killed (the first ran the migrations).
    survivor = startSample(env);
    const keys = Array.from({ length: IN_FLIGHT }, (_, i) => `crash-${i}`);
    const crash = await crashWithRequestsInside(db, gateway, victim, keys);
    // The claims stay, leased for a while yet: only the victim's presence,
    // gone with its process, tells that nobody runs them any more.
    expect(crash.afterKill).toEqual({
      payments: 0,
      ledgerEntries: 0,
      claims: IN_FLIGHT,
      unowned: 0,
      unexpiredLeases: IN_FLIGHT,
      steps: IN_FLIGHT,
      instances: 1,
    });
    expect(await presenceBackend(db, crash.instance!)).toBeUndefined();

    const { url } = await survivor;
    const retries = await Promise.all(keys.map((key) => pay(url, key)));
    // At once: no 409 for a key claimed by the dead instance.
    const { final, replays } = await expectExecutedOnce(crash, retries, url);
    console.log(
      `crash: ${IN_FLIGHT} requests inside the handler (charged) at SIGKILL; ` +
        `after the kill ${crash.afterKill.payments} payments, ${crash.afterKill.claims} claims ` +
        `(${crash.afterKill.unexpiredLeases} with their lease unexpired), ${crash.afterKill.steps} steps kept; ` +
        `retries on another instance ${retries.filter((retry) => retry.status === 201 && !retry.replayed).length} × 201 (none 409); ` +
        `${final.payments} payments, ${final.ledgerEntries} ledger entries, ${final.charges} gateway charges ` +
        `(${IN_FLIGHT} reused from steps); ${replays} byte-identical replays`,
    );
  });
});

describe('an instance without presence killed with requests inside the handler', () => {
  /**
   * Short, so that the dead claims run out within the test; long enough
   * that they are still leased when the first retries reach the survivor,
   * however busy the machine (the victim renews them every third of it
   * while it lives, and the server ends its sessions after the kill).
   */
  const LEASE_SECONDS = 10;

  it(`keeps each key for what is left of its ${LEASE_SECONDS} s lease (409, Retry-After within it), then lets the retry execute once`, async () => {
    const env = sampleEnv({
      SAMPLE_PRESENCE: 'off',
      SAMPLE_LEASE: `${LEASE_SECONDS}s`,
      // Longer than the lease: the lease left bounds the answer.
      SAMPLE_RETRY_AFTER: '60',
    });
    victim = await startSample(env, TUNED_SAMPLE);
    survivor = startSample(env, TUNED_SAMPLE);
    // Ready before the kill: the first retries go out as soon as the
    // victim's sessions have ended, not after the survivor's start.
    const { url } = await survivor;
    const keys = Array.from({ length: IN_FLIGHT }, (_, i) => `lease-${i}`);
    const crash = await crashWithRequestsInside(db, gateway, victim, keys);
    expect(crash.instance).toBeNull();
    expect(crash.afterKill).toMatchObject({
      payments: 0,
      ledgerEntries: 0,
      claims: IN_FLIGHT,
      unowned: IN_FLIGHT,
      steps: IN_FLIGHT,
    });
    const killedAt = Date.now();

    // The longest lease left now, in whole seconds (rounded up).
    const [{ left }] = await db.query<{ left: number }>(
      `SELECT ceil(extract(epoch FROM max(lease_expires_at) - now()))::int AS left
       FROM idempotency_records WHERE status = 'in_progress'`,
    );
    expect(left).toBeLessThanOrEqual(LEASE_SECONDS);
    const first = await Promise.all(keys.map((key) => pay(url, key)));
    const refused = first.filter((answer) => answer.status === 409);
    for (const answer of refused) {
      expect(answer.contentType).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(answer.body.toString())).toMatchObject({
        type: 'urn:idempotency:request-in-progress',
        status: 409,
      });
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(0);
      expect(Number(answer.retryAfter)).toBeLessThanOrEqual(left);
    }
    // Unless its lease ran out meanwhile, every key is still held.
    const stillLeased = await countRows(
      db,
      `SELECT 1 FROM idempotency_records
       WHERE status = 'in_progress' AND lease_expires_at > now()`,
    );
    expect(refused.length).toBeGreaterThanOrEqual(stillLeased);
    expect(refused.length).toBeGreaterThan(0);
    expect(await countRows(db, 'SELECT 1 FROM payments')).toBe(0);

    // A client honouring Retry-After: the server's delay, not the test's.
    const retryAfters: string[] = [];
    const retryUntilDone = async (answer: PaymentAnswer) => {
      let attempts = 1;
      while (answer.status === 409 && attempts < 100) {
        retryAfters.push(String(answer.retryAfter));
        await new Promise<void>((resolve) =>
          setTimeout(resolve, Number(answer.retryAfter) * 1000),
        );
        answer = await pay(url, answer.key);
        attempts += 1;
      }
      return { answer, attempts };
    };
    const done = await Promise.all(first.map(retryUntilDone));
    const elapsedMs = Date.now() - killedAt;
    const retries = done.map(({ answer }) => answer);
    const { final } = await expectExecutedOnce(crash, retries, url);
    console.log(
      `crash without presence (lease ${LEASE_SECONDS} s): ${IN_FLIGHT} requests inside the handler at SIGKILL; ` +
        `first retries ${refused.length} × 409 (Retry-After ${[...new Set(refused.map((r) => r.retryAfter))].join('/')} s, lease left ≤ ${left} s); ` +
        `all ${retries.length} executed ${elapsedMs} ms after the kill, in ${Math.max(...done.map((d) => d.attempts))} attempts at most ` +
        `(Retry-After of the 409s: ${[...new Set(retryAfters)].map((value) => `${retryAfters.filter((v) => v === value).length} × ${value}`).join(', ')}); ` +
        `${final.payments} payments, ${final.charges} gateway charges`,
    );
  });
});
