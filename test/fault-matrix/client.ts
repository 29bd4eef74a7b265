import { until } from '../utils/barrier.js';
import { DERIVED_KEY } from '../utils/derived-keys.js';
import { requestCharge, type FakeGateway } from '../utils/fake-gateway.js';
import type { Platform } from '../utils/test-app.js';
import type { Control } from './control.js';
import {
  AMOUNT,
  asRefusal,
  failed,
  label,
  LEASE_OVER,
  MAX_TRIES,
  OTHER_AMOUNT,
  OVER_LIMIT,
  read,
  refusal,
  type Reply,
} from './replies.js';

/**
 * The lease of the claims of the cells whose instance survives its fault
 * and can give its claim up: long enough that a claim left behind still
 * holds its key when the retry comes, however busy the machine, so that
 * the retry's 409 shows it. Such a cell never waits for a lease to end.
 */
export const LIVE_LEASE_MS = 15_000;

/**
 * The lease of the claims of the cells whose fault leaves a claim behind
 * (`claimLeft`), on every store: short, so that it frees its key soon, yet
 * long enough that the retry, sent after the checks of the failed answer (a
 * probe with another body among them), still finds the claim live on a
 * busy machine and gets the 409 its cell expects (at 500 ms and 1 s, some
 * retries came after the lease's end and ran at once).
 */
export const LEFT_LEASE_MS = 2_000;

/** What the clients of a matrix's cells need of its application and store. */
export interface MatrixApp {
  readonly platform: Platform;
  /** The application's base URL. */
  readonly url: string;
  readonly control: Control;
  readonly gateway: FakeGateway;
  /** The claims' lease: what a key left claimed may take to come back. */
  readonly leaseMs: number;
  /** Checks an answer once it came, before anything else is sent. */
  checkAnswer(client: CellClient, reply: Reply): Promise<void>;
  /** Whether a `charge` step of `key` is stored: the key is bound. */
  charged(key: string): Promise<boolean>;
  /** What the store holds for `key`, as a refused request must leave it. */
  held(key: string): Promise<unknown>;
  /**
   * When the live claim that holds `key` ends, in epoch ms of the store's
   * clock (the machine's); 0 when no live claim holds it.
   */
  claimEnds(key: string): Promise<number>;
}

/** The client of one cell: its request, its retries, the binding's probes. */
export interface CellClient {
  readonly key: string;
  /** Whether it asks `POST /payments/limited` (over the limit: a 402). */
  readonly limited: boolean;
  /**
   * The answers after which the binding was probed (another body under the
   * key, refused with 422), in order.
   */
  readonly probed: string[];
  /** Sends the request (same key, same body). */
  send(): Promise<Response>;
  /** The answers of one client: `first`, then retries past 503 and 409. */
  settle(first: Promise<Response>): Promise<Reply[]>;
  /**
   * Resolves once a release the cell's fault failed has landed
   * (`releasedLate`); at once otherwise.
   */
  released(): Promise<void>;
}

/** `POST path` to the application at `url`, under `key`, with a JSON body. */
const post = (url: string, path: string, key: string, body: unknown) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });

/** What a client needs of its cell. */
export interface ClientCell {
  readonly point: string;
  readonly when: string;
  /**
   * Whether the fault leaves the claim to its lease: its attempt cannot
   * know that it holds it (the claim's answer lost) or cannot give it up
   * (its release lost, or the store's client still away). Otherwise the
   * instance frees the key with its answer (I4), and the retry sent right
   * after a failed answer is never refused with a 409.
   */
  readonly claimLeft?: boolean;
  /**
   * Whether the fault failed the release of the claim (the store's client
   * still away when the handler failed): the instance tries it again until
   * it lands, which frees the key once the store answers (a few of its
   * retries, every 500 ms), long before the claim's lease
   * ({@link LIVE_LEASE_MS}) would. The client waits for that after each
   * failed answer, and fails unless the key was free before the lease's
   * end (a release, not a lapse), then retries: never a 409.
   */
  readonly releasedLate?: boolean;
}

/**
 * The client of the cell at `point`/`when` (a key of its own). After each
 * of its failed answers whose key is bound, and once a 409's claim lapsed
 * with the key bound, it probes the binding (I6): another body under the
 * key gets 422 problem+json, runs no handler, calls no gateway (not even
 * under the derived key), and leaves the store as it was, for the request
 * that charged to resume. Unless the cell's fault leaves the claim
 * (`claimLeft`), a 409 fails the cell at once: the key was not freed.
 */
export function cellClient(
  app: MatrixApp,
  cell: ClientCell,
  limited: boolean,
): CellClient {
  const { url, control, gateway } = app;
  const key = `fm-${app.platform}-${cell.point}-${cell.when}`.replaceAll(
    ' ',
    '-',
  );
  const path = limited ? '/payments/limited' : '/payments';
  const body = { reference: key, amount: limited ? OVER_LIMIT : AMOUNT };
  const bound = async () => !limited && (await app.charged(key));

  const observe = async () => ({
    runs: control.runs.get(key) ?? 0,
    gatewayCalls: gateway.calls.get(control.chargeKey(key) ?? '') ?? 0,
    charges: gateway.chargeCount,
    held: await app.held(key),
  });
  const probe = async (after: string) => {
    client.probed.push(after);
    const before = await observe();
    const answer = await read(
      post(url, '/payments', key, { reference: key, amount: OTHER_AMOUNT }),
    );
    expect(asRefusal(answer, after)).toEqual(refusal(key, after));
    expect(await observe()).toEqual(before);
  };

  /** Waits until no live claim holds the key: within its lease, or it is stuck. */
  const claimed = async () => (await app.claimEnds(key)) > 0;
  const untilClaimFree = () =>
    until(
      async () => !(await claimed()),
      `the claim of ${key} to lapse within its lease`,
      app.leaseMs + 1_000,
    );

  const client: CellClient = {
    key,
    limited,
    probed: [],
    async released() {
      if (cell.releasedLate) {
        // Bounded by the lease, not by a guess of how soon (a busy machine
        // may hold the store's client back for seconds): a key found free
        // before its lease's end was released, not lapsed.
        const ends = await app.claimEnds(key);
        if (ends === 0) {
          // Already free: released while the answer was read.
          return;
        }
        await until(
          async () => !(await claimed()),
          `the release of the claim of ${key} to land once the store answers`,
          Math.max(0, ends - Date.now()) + 1_000,
        );
        expect(Date.now()).toBeLessThan(ends);
      }
    },
    send: () => post(url, path, key, body),
    async settle(first) {
      const replies: Reply[] = [];
      let next = first;
      for (;;) {
        const reply = await read(next);
        replies.push(reply);
        await app.checkAnswer(client, reply);
        if (reply.status === 503) {
          // Before the probe: a release still being retried would change
          // the store under the probe's comparison.
          await client.released();
        }
        if (failed(reply) && (await bound())) {
          await probe(label(reply));
        }
        if (reply.status !== 503 && reply.status !== 409) {
          return replies;
        }
        if (replies.length >= MAX_TRIES) {
          throw new Error(
            `${key}: no answer past ${replies.map(label).join(', ')}`,
          );
        }
        if (reply.status === 409) {
          if (!cell.claimLeft) {
            // I4: the instance lives, and its key is still claimed.
            throw new Error(
              `${key}: refused with 409 after ${replies.slice(0, -1).map(label).join(', ') || 'nothing'}: ` +
                `a claim of the key was left behind (live: ${await claimed()}), ` +
                `the retry waits for its lease (${app.leaseMs} ms) instead of running at once`,
            );
          }
          await untilClaimFree();
          // Released by its lease's end, the key stays bound.
          if (await bound()) {
            await probe(LEASE_OVER);
          }
        }
        next = client.send();
      }
    },
  };
  return client;
}

/** No answer is a 5xx other than a 503 (a 500 least of all). */
export function expectNoServerError(replies: readonly Reply[]): void {
  expect(replies.filter((r) => r.status >= 500 && r.status !== 503)).toEqual(
    [],
  );
}

/**
 * The gateway made one charge since it had `charges`, called `calls` times
 * under the derived key of `key`, and answers that key with the charge the
 * application named (`chargeId`), for `AMOUNT`.
 */
export async function expectOneCharge(
  gateway: FakeGateway,
  control: Control,
  key: string,
  charges: number,
  calls: number,
  chargeId: string,
): Promise<void> {
  const derivedKey = control.chargeKey(key) ?? 'none derived';
  expect(derivedKey).toMatch(DERIVED_KEY);
  expect(gateway.chargeCount).toBe(charges + 1);
  expect(gateway.calls.get(derivedKey)).toBe(calls);
  // The gateway answers a known key with its charge.
  const charge = await requestCharge(gateway.url, AMOUNT, derivedKey);
  expect(charge).toEqual({ id: chargeId, amount: AMOUNT });
}
