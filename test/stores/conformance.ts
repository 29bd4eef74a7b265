import { randomUUID } from 'node:crypto';
import type {
  AbandonedKey,
  ClaimRequest,
  Completion,
  IdempotencyStore,
  Lease,
  StepLease,
  StoredResponse,
} from '../../src/interfaces/idempotency-store.interface.js';
import { asTheModuleCallsIt, generationOf } from '../utils/store-handles.js';
import { describeAdminConformance } from './admin-conformance.js';

/** A store to run the conformance suite on, and how to let it go. */
export interface StoreUnderTest {
  readonly store: IdempotencyStore;
  close(): Promise<void>;
}

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;

/**
 * The claim protocol every {@link IdempotencyStore} must keep, through its
 * interface only: claims and their outcomes, the owner's fence on every
 * write, leases (renewal, takeover after expiry), recovery points and their
 * collection. Each test works in a scope of its own, so that the suite runs
 * on a store shared with anything else.
 *
 * Expiry is reached without waiting: a lease or a time to live of 0 ms has
 * expired by the next call.
 */
export function describeStoreConformance(
  name: string,
  factory: () => Promise<StoreUnderTest>,
  capabilities: {
    /**
     * Whether a claim sent again by the attempt that holds it is granted
     * again: for a store whose client resends a request when a lost
     * connection lost its reply (ioredis, the AWS SDK).
     */
    readonly resentClaims?: boolean;
    /**
     * Whether a completion sent again by the attempt that wrote it is
     * acknowledged again (fenced, writing nothing): for a store whose client
     * resends a request when a lost connection lost its reply.
     */
    readonly resentCompletions?: boolean;
    /**
     * Whether the store counts failed attempts (`countFailure`, which
     * `maxAttempts` needs); every built-in store does.
     * @default true
     */
    readonly countsFailures?: boolean;
    /**
     * Whether the suite hands the store bare leases (scope, key and owner),
     * as a caller other than the module would, instead of what the module
     * hands as leases: the store's handle of the claim, else its request
     * (see `Lease`).
     */
    readonly bareLeases?: boolean;
    /**
     * Whether the store has the operator's operations (`inspectRecord`,
     * `listRecords`, `resetRecord`, `forgetRecords`); without them, the
     * admin's refusal is tested.
     * @default true
     */
    readonly admin?: boolean;
  } = {},
): void {
  describe(`IdempotencyStore conformance: ${name}`, () => {
    let subject: StoreUnderTest;
    let store: IdempotencyStore;
    let scope: string;

    beforeAll(async () => {
      subject = await factory();
      store = asTheModuleCallsIt(subject.store);
    });
    afterAll(() => subject?.close());
    beforeEach(() => {
      scope = `conformance-${randomUUID()}`;
    });

    /** A claim of `key` by a new attempt (owner). */
    const attempt = (
      key: string,
      overrides: Partial<ClaimRequest> = {},
    ): ClaimRequest => ({
      scope,
      key,
      owner: randomUUID(),
      fingerprint: 'fp-1',
      method: 'POST',
      path: '/conformance/:id',
      leaseMs: MINUTE_MS,
      ttlMs: HOUR_MS,
      wait: false,
      ...overrides,
    });
    /** The lease of a granted claim: the request itself, as the module hands it, or bare. */
    const leaseOf = (claim: Lease): Lease =>
      capabilities.bareLeases
        ? { scope: claim.scope, key: claim.key, owner: claim.owner }
        : claim;
    /** The lease a step is saved and read with: bare, it still names its request. */
    const stepLeaseOf = (claim: ClaimRequest): StepLease =>
      capabilities.bareLeases
        ? {
            scope: claim.scope,
            key: claim.key,
            owner: claim.owner,
            fingerprint: claim.fingerprint,
          }
        : claim;
    const response: StoredResponse = {
      status: 201,
      headers: {
        'content-type': 'application/json; charset=utf-8',
        'x-request-trace': ['a', 'b'],
      },
      body: Buffer.from([0x7b, 0x7d, 0x00, 0xff]),
    };
    const completion: Completion = {
      status: 'completed',
      response,
      ttlMs: HOUR_MS,
    };

    it('claims a free key', async () => {
      expect(await store.claim(attempt('free'))).toEqual({ state: 'claimed' });
    });

    if (capabilities.resentClaims) {
      it('grants a claim again to the attempt that holds it (its client resent it after a lost reply), and to no other', async () => {
        const claim = attempt('resent');
        expect(await store.claim(claim)).toEqual({ state: 'claimed' });
        expect(await store.claim(claim)).toEqual({ state: 'claimed' });
        expect(await store.claim(attempt('resent'))).toMatchObject({
          state: 'in_progress',
        });
        expect(
          await store.complete(leaseOf(claim), completion, undefined),
        ).toEqual({ fenced: true, waiting: false });
        expect(await store.claim(claim)).toMatchObject({ state: 'finished' });
      });
    }

    it('gives a key to exactly one of many attempts claiming it at once', async () => {
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, () => store.claim(attempt('race'))),
      );
      expect(outcomes.filter((o) => o.state === 'claimed')).toHaveLength(1);
      expect(outcomes.filter((o) => o.state === 'in_progress')).toHaveLength(
        19,
      );
    });

    it('keeps scopes apart: the same key is another record in another scope', async () => {
      const first = attempt('shared');
      const other = attempt('shared', { scope: `${scope}:other` });
      expect(await store.claim(first)).toEqual({ state: 'claimed' });
      expect(await store.claim(other)).toEqual({ state: 'claimed' });
      await store.complete(leaseOf(first), completion, undefined);
      expect(
        await store.claim(attempt('shared', { scope: `${scope}:other` })),
      ).toMatchObject({ state: 'in_progress' });
      expect(await store.release(leaseOf(other))).toMatchObject({
        fenced: true,
      });
      expect(await store.claim(attempt('shared'))).toMatchObject({
        state: 'finished',
      });
    });

    it('takes keys and scopes of any characters, each its own record', async () => {
      // Characters that mean something to some store: quotes, glob and
      // pattern characters, separators, hash-tag braces, escapes, spaces,
      // control characters and characters beyond ASCII.
      const keys = [
        'k',
        'k*',
        'k?',
        '[k]',
        "k'; DROP TABLE x; --",
        'k"\\',
        'k%_',
        '{k}',
        'k:k#k',
        'k k\n\t\u0001',
        'kλ💳',
      ];
      const weird = `${scope}:{*}'"\\%`;
      for (const key of keys) {
        expect(await store.claim(attempt(key, { scope: weird }))).toEqual({
          state: 'claimed',
        });
      }
      const claim = attempt("k'; DROP TABLE x; --", { scope: weird });
      expect(await store.claim(claim)).toMatchObject({
        state: 'in_progress',
      });
      for (const key of keys) {
        expect(await store.claim(attempt(key))).toEqual({ state: 'claimed' });
      }
    });

    it('reports a claimed key in progress to another attempt, with its fingerprint and the lease left', async () => {
      const first = attempt('busy');
      expect(await store.claim(first)).toEqual({ state: 'claimed' });
      const second = await store.claim(
        attempt('busy', { fingerprint: 'fp-2' }),
      );
      expect(second).toEqual({
        state: 'in_progress',
        fingerprint: 'fp-1',
        leaseMs: expect.any(Number),
      });
      const { leaseMs } = second as { leaseMs: number };
      expect(leaseMs).toBeGreaterThan(0);
      expect(leaseMs).toBeLessThanOrEqual(MINUTE_MS);
    });

    it('completes a claim for its owner only, once', async () => {
      const claim = attempt('complete');
      await store.claim(claim);
      const stranger = { ...leaseOf(claim), owner: randomUUID() };
      expect(await store.complete(stranger, completion, undefined)).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(
        await store.complete(leaseOf(claim), completion, undefined),
      ).toEqual({ fenced: true, waiting: false });
      // Sent again: acknowledged again or refused, never written again.
      const again: Completion = {
        ...completion,
        response: { ...response, status: 500 },
      };
      expect(await store.complete(leaseOf(claim), again, undefined)).toEqual({
        fenced: capabilities.resentCompletions === true,
        waiting: false,
      });
      expect(await store.claim(attempt('complete'))).toMatchObject({
        state: 'finished',
        record: { response: { status: 201 } },
      });
      expect(await store.complete(stranger, completion, undefined)).toEqual({
        fenced: false,
        waiting: false,
      });
    });

    it('returns the finished record to later attempts, byte for byte', async () => {
      const claim = attempt('finished');
      await store.claim(claim);
      await store.complete(leaseOf(claim), completion, undefined);
      for (const fingerprint of ['fp-1', 'fp-2']) {
        expect(await store.claim(attempt('finished', { fingerprint }))).toEqual(
          {
            state: 'finished',
            record: { status: 'completed', fingerprint: 'fp-1', response },
          },
        );
      }
    });

    it('keeps the status of a response it could not store', async () => {
      const claim = attempt('not-replayable');
      await store.claim(claim);
      expect(
        await store.complete(
          leaseOf(claim),
          {
            status: 'not_replayable',
            response: { status: 201 },
            ttlMs: HOUR_MS,
          },
          undefined,
        ),
      ).toEqual({ fenced: true, waiting: false });
      expect(await store.claim(attempt('not-replayable'))).toEqual({
        state: 'finished',
        record: expect.objectContaining({
          status: 'not_replayable',
          fingerprint: 'fp-1',
          response: expect.objectContaining({ status: 201 }),
        }),
      });
    });

    it('claims a finished key again once its record expired', async () => {
      const claim = attempt('expired-record');
      await store.claim(claim);
      await store.complete(
        leaseOf(claim),
        { ...completion, ttlMs: 0 },
        undefined,
      );
      expect(await store.claim(attempt('expired-record'))).toEqual({
        state: 'claimed',
      });
    });

    it('releases a claim for its owner only: the next attempt claims at once', async () => {
      const claim = attempt('release');
      await store.claim(claim);
      expect(
        await store.release({ ...leaseOf(claim), owner: randomUUID() }),
      ).toEqual({ fenced: false, waiting: false });
      expect(await store.claim(attempt('release'))).toMatchObject({
        state: 'in_progress',
      });
      expect(await store.release(leaseOf(claim))).toEqual({
        fenced: true,
        waiting: false,
      });
      expect(await store.release(leaseOf(claim))).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(await store.claim(attempt('release'))).toEqual({
        state: 'claimed',
      });
    });

    it('tells the completion and the release that a duplicate waits for the key', async () => {
      const completed = attempt('waited-complete');
      await store.claim(completed);
      expect(
        await store.claim(attempt('waited-complete', { wait: true })),
      ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
      expect(
        await store.complete(leaseOf(completed), completion, undefined),
      ).toEqual({ fenced: true, waiting: true });

      const released = attempt('waited-release');
      await store.claim(released);
      await store.claim(attempt('waited-release', { wait: true }));
      expect(await store.release(leaseOf(released))).toEqual({
        fenced: true,
        waiting: true,
      });
    });

    it('lets another attempt take a claim over once its lease expired; the first one is fenced out of every write', async () => {
      const first = attempt('takeover', { leaseMs: 0 });
      expect(await store.claim(first)).toEqual({ state: 'claimed' });
      const second = attempt('takeover');
      expect(await store.claim(second)).toEqual({ state: 'claimed' });

      // The first one finishes while the second still runs: every write of
      // it is refused, its answer included.
      const stale: Completion = {
        ...completion,
        response: { ...response, status: 200, body: Buffer.from('stale') },
      };
      expect(
        await store.saveStep(stepLeaseOf(first), 'charge', 1, HOUR_MS),
      ).toBe(false);
      expect(await store.complete(leaseOf(first), stale, undefined)).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(await store.release(leaseOf(first))).toEqual({
        fenced: false,
        waiting: false,
      });
      expect(await store.claim(attempt('takeover'))).toMatchObject({
        state: 'in_progress',
      });
      expect(
        await store.complete(leaseOf(second), completion, undefined),
      ).toEqual({ fenced: true, waiting: false });
      // The record is the second one's.
      expect(await store.claim(attempt('takeover'))).toMatchObject({
        state: 'finished',
        record: { status: 'completed', fingerprint: 'fp-1', response },
      });
    });

    it('renews the leases still held, each for its own duration, and returns their owners', async () => {
      expect([...(await store.renew([]))]).toEqual([]);
      const held = attempt('renew-held', { leaseMs: 1_000 });
      const lost = attempt('renew-lost', { leaseMs: 0 });
      const finished = attempt('renew-finished');
      await store.claim(held);
      await store.claim(lost);
      await store.claim(finished);
      await store.complete(leaseOf(finished), completion, undefined);
      const taker = attempt('renew-lost');
      expect(await store.claim(taker)).toEqual({ state: 'claimed' });

      const owners = await store.renew(
        [held, lost, finished].map((claim) => ({
          ...leaseOf(claim),
          durationMs: 10 * MINUTE_MS,
        })),
      );
      expect([...owners]).toEqual([held.owner]);
      // The renewed lease runs for the duration asked, not the first one.
      const duplicate = await store.claim(attempt('renew-held'));
      expect(duplicate).toMatchObject({ state: 'in_progress' });
      expect((duplicate as { leaseMs: number }).leaseMs).toBeGreaterThan(
        5 * MINUTE_MS,
      );
      // The taker's lease was not touched by the lost owner's renewal.
      const taken = await store.claim(attempt('renew-lost'));
      expect((taken as { leaseMs: number }).leaseMs).toBeLessThanOrEqual(
        MINUTE_MS,
      );
    });

    it("saves a step's result for the claim's owner only, reads it back, and clears it on completion", async () => {
      const claim = attempt('steps');
      await store.claim(claim);
      const stranger = { ...stepLeaseOf(claim), owner: randomUUID() };
      expect(
        await store.saveStep(stranger, 'charge', { id: 'ch_x' }, HOUR_MS),
      ).toBe(false);
      expect(
        await store.readStep(stepLeaseOf(claim), 'charge'),
      ).toBeUndefined();

      const charge = { id: 'ch_1', amount: 1250, tags: ['a', null] };
      expect(
        await store.saveStep(stepLeaseOf(claim), 'charge', charge, HOUR_MS),
      ).toBe(true);
      expect(
        await store.saveStep(stepLeaseOf(claim), 'empty', null, HOUR_MS),
      ).toBe(true);
      expect(await store.readStep(stepLeaseOf(claim), 'charge')).toEqual({
        result: charge,
      });
      expect(await store.readStep(stepLeaseOf(claim), 'empty')).toEqual({
        result: null,
      });
      expect(await store.readStep(stepLeaseOf(claim), 'other')).toBeUndefined();
      // A retry of the step overwrites its result.
      expect(
        await store.saveStep(
          stepLeaseOf(claim),
          'charge',
          { id: 'ch_2' },
          HOUR_MS,
        ),
      ).toBe(true);
      expect(await store.readStep(stepLeaseOf(claim), 'charge')).toEqual({
        result: { id: 'ch_2' },
      });
      // Another attempt (after a takeover) reads the steps of the key.
      await store.release(leaseOf(claim));
      const retry = attempt('steps');
      expect(await store.claim(retry)).toEqual({ state: 'claimed' });
      expect(await store.readStep(stepLeaseOf(retry), 'charge')).toEqual({
        result: { id: 'ch_2' },
      });

      await store.complete(leaseOf(retry), completion, undefined);
      expect(
        await store.readStep(stepLeaseOf(retry), 'charge'),
      ).toBeUndefined();
      expect(await store.readStep(stepLeaseOf(retry), 'empty')).toBeUndefined();
    });

    it('binds a key with a committed step to its request: released, only the same request claims it again and resumes; another one is refused until it completes', async () => {
      const first = attempt('bound');
      expect(await store.claim(first)).toEqual({ state: 'claimed' });
      expect(
        await store.saveStep(
          stepLeaseOf(first),
          'charge',
          { amount: 100 },
          HOUR_MS,
        ),
      ).toBe(true);
      expect(await store.release(leaseOf(first))).toEqual({
        fenced: true,
        waiting: false,
      });
      const other = attempt('bound', { fingerprint: 'fp-2' });
      expect(await store.claim(other)).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp-1',
      });
      // Refused again: the refusal took nothing over.
      expect(await store.claim(other)).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp-1',
      });
      expect(
        await store.readStep(stepLeaseOf(other), 'charge'),
      ).toBeUndefined();
      expect(
        await store.saveStep(stepLeaseOf(other), 'charge', 2, HOUR_MS),
      ).toBe(false);

      const retry = attempt('bound');
      expect(await store.claim(retry)).toEqual({ state: 'claimed' });
      expect(await store.readStep(stepLeaseOf(retry), 'charge')).toEqual({
        result: { amount: 100 },
      });
      expect(await store.claim(other)).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp-1',
      });
      // Released again without completing: still bound.
      expect(await store.release(leaseOf(retry))).toMatchObject({
        fenced: true,
      });
      expect(await store.claim(other)).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp-1',
      });
      const last = attempt('bound');
      expect(await store.claim(last)).toEqual({ state: 'claimed' });
      expect(
        await store.complete(leaseOf(last), completion, undefined),
      ).toEqual({ fenced: true, waiting: false });
      expect(await store.claim(other)).toMatchObject({
        state: 'finished',
        record: { fingerprint: 'fp-1' },
      });
    });

    it('keeps a key with a committed step bound across a takeover: once the lease expired, only the same request takes it over', async () => {
      const first = attempt('bound-takeover');
      await store.claim(first);
      expect(
        await store.saveStep(stepLeaseOf(first), 'charge', 'ch_1', HOUR_MS),
      ).toBe(true);
      expect([
        ...(await store.renew([{ ...leaseOf(first), durationMs: 0 }])),
      ]).toEqual([first.owner]);

      const other = attempt('bound-takeover', { fingerprint: 'fp-2' });
      expect(await store.claim(other)).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp-1',
      });
      const same = attempt('bound-takeover');
      expect(await store.claim(same)).toEqual({ state: 'claimed' });
      expect(await store.readStep(stepLeaseOf(same), 'charge')).toEqual({
        result: 'ch_1',
      });
      expect(
        await store.saveStep(stepLeaseOf(first), 'refund', 'x', HOUR_MS),
      ).toBe(false);
    });

    it('saves and reads back any JSON value a step returns: U+0000, an unpaired surrogate, a backslash before u0000, an object like its own encoding', async () => {
      const results = [
        { memo: 'abc\u0000def' },
        'x\ud800y',
        ['\udc00', 'ok \ud83d\ude00'],
        'a \\u0000 literal',
        { '$idempotency:json': '1' },
      ];
      const owner = attempt('odd-results');
      await store.claim(owner);
      for (const [index, result] of results.entries()) {
        expect(
          await store.saveStep(
            stepLeaseOf(owner),
            `s${index}`,
            result,
            HOUR_MS,
          ),
        ).toBe(true);
      }
      for (const [index, result] of results.entries()) {
        expect(await store.readStep(stepLeaseOf(owner), `s${index}`)).toEqual({
          result,
        });
      }
    });

    it('frees a key released without any step for any request', async () => {
      const first = attempt('unbound');
      await store.claim(first);
      await store.release(leaseOf(first));
      expect(
        await store.claim(attempt('unbound', { fingerprint: 'fp-2' })),
      ).toEqual({ state: 'claimed' });
    });

    if (capabilities.countsFailures === false) {
      it('counts no failed attempts (maxAttempts cannot be used with it)', () => {
        expect(store.countFailure).toBeUndefined();
      });
    } else {
      describe('failed attempts of a key', () => {
        const count = (key: string, ttlMs = HOUR_MS) =>
          store.countFailure!({ scope, key }, ttlMs);

        it('are counted across releases of the claim, which the count keeps free for any request', async () => {
          const counts: number[] = [];
          for (const fingerprint of ['fp-1', 'fp-1', 'fp-2']) {
            const failed = attempt('poison', { fingerprint });
            expect(await store.claim(failed)).toEqual({ state: 'claimed' });
            expect(await store.release(leaseOf(failed))).toEqual({
              fenced: true,
              waiting: false,
            });
            counts.push(await count('poison'));
          }
          expect(counts).toEqual([1, 2, 3]);
          // A completion after failures neither resets nor hides the count.
          const done = attempt('poison');
          await store.claim(done);
          await store.complete(leaseOf(done), completion, undefined);
          expect(await count('poison')).toBe(4);
        });

        it('are counted apart per key and per scope', async () => {
          expect(await count('one')).toBe(1);
          expect(await count('one')).toBe(2);
          expect(await count('two')).toBe(1);
          expect(
            await store.countFailure!(
              { scope: `${scope}-other`, key: 'one' },
              HOUR_MS,
            ),
          ).toBe(1);
          expect(await count('one')).toBe(3);
        });

        it('start again once the count expired', async () => {
          expect(await count('expiring', 0)).toBe(1);
          expect(await count('expiring')).toBe(1);
          expect(await count('expiring')).toBe(2);
        });

        it('are forgotten on demand (a dead-lettered message), for that key alone: counted from one again', async () => {
          await count('forgotten');
          await count('forgotten');
          await count('kept');
          await store.forgetFailures!({ scope, key: 'forgotten' });
          // A key never counted: nothing to forget.
          await store.forgetFailures!({ scope, key: 'never-counted' });
          expect(await count('forgotten')).toBe(1);
          expect(await count('kept')).toBe(2);
        });

        it('are each counted under concurrent counts of the key', async () => {
          const counts = await Promise.all(
            Array.from({ length: 8 }, () => count('raced')),
          );
          expect([...counts].sort((a, b) => a - b)).toEqual([
            1, 2, 3, 4, 5, 6, 7, 8,
          ]);
        });
      });
    }

    describe("a key's generation", () => {
      it('is returned with every claim granted: one per key, another in another scope', async () => {
        const a = attempt('generation');
        const b = attempt('generation-other');
        const c = attempt('generation', { scope: `${scope}-other` });
        for (const claim of [a, b, c]) {
          expect(await store.claim(claim)).toEqual({ state: 'claimed' });
        }
        expect(new Set([a, b, c].map(generationOf)).size).toBe(3);
      });

      it('is kept by a takeover of an ended lease, while the key has not expired', async () => {
        const first = attempt('generation-takeover', { leaseMs: 0 });
        await store.claim(first);
        const second = attempt('generation-takeover');
        expect(await store.claim(second)).toEqual({ state: 'claimed' });
        expect(generationOf(second)).toBe(generationOf(first));
      });

      it('is kept, with the key bound to its request, by a release that binds it: the same request claims it again and again, another is refused', async () => {
        const first = attempt('generation-kept');
        await store.claim(first);
        expect(await store.release(leaseOf(first), true)).toEqual({
          fenced: true,
          waiting: false,
        });
        expect(
          await store.claim(
            attempt('generation-kept', { fingerprint: 'fp-2' }),
          ),
        ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
        const retry = attempt('generation-kept');
        expect(await store.claim(retry)).toEqual({ state: 'claimed' });
        // Released again, not told to bind: the key stays bound.
        await store.release(leaseOf(retry));
        expect(
          await store.claim(
            attempt('generation-kept', { fingerprint: 'fp-2' }),
          ),
        ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
        const again = attempt('generation-kept');
        expect(await store.claim(again)).toEqual({ state: 'claimed' });
        expect(generationOf(retry)).toBe(generationOf(first));
        expect(generationOf(again)).toBe(generationOf(first));
        // Still fenced: the released attempts write nothing.
        expect(await store.release(leaseOf(first), true)).toEqual({
          fenced: false,
          waiting: false,
        });
        expect(
          await store.complete(leaseOf(retry), completion, undefined),
        ).toEqual({ fenced: false, waiting: false });
        expect(
          await store.complete(leaseOf(again), completion, undefined),
        ).toEqual({ fenced: true, waiting: false });
        // Completed, the key replays to its request, and refuses another by
        // its fingerprint.
        expect(
          await store.claim(
            attempt('generation-kept', { fingerprint: 'fp-2' }),
          ),
        ).toMatchObject({ state: 'finished', record: { fingerprint: 'fp-1' } });
      });

      it('is kept, with the key bound to its request, from bind(): through a takeover and a release, for the same request only', async () => {
        const live = attempt('generation-bind-live');
        await store.claim(live);
        expect(await store.bind(stepLeaseOf(live))).toBe(true);
        expect(
          await store.claim(
            attempt('generation-bind-live', {
              fingerprint: 'fp-2',
              leaseMs: 0,
            }),
          ),
        ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
        await store.release(leaseOf(live));
        expect(
          await store.claim(
            attempt('generation-bind-live', { fingerprint: 'fp-2' }),
          ),
        ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
        const retry = attempt('generation-bind-live', { leaseMs: 0 });
        expect(await store.claim(retry)).toEqual({ state: 'claimed' });
        expect(generationOf(retry)).toBe(generationOf(live));
        // Its lease ended (a crash): the same request takes it over, with
        // the same generation; another is refused.
        expect(
          await store.claim(
            attempt('generation-bind-live', { fingerprint: 'fp-2' }),
          ),
        ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
        const takeover = attempt('generation-bind-live');
        expect(await store.claim(takeover)).toEqual({ state: 'claimed' });
        expect(generationOf(takeover)).toBe(generationOf(live));
      });

      it('refuses bind() to an attempt that lost its claim, and binds nothing then', async () => {
        const stale = attempt('generation-bind-stale', { leaseMs: 0 });
        await store.claim(stale);
        const owner = attempt('generation-bind-stale');
        await store.claim(owner);
        expect(await store.bind(stepLeaseOf(stale))).toBe(false);
        expect(
          await store.bind({ ...stepLeaseOf(owner), owner: randomUUID() }),
        ).toBe(false);
        await store.release(leaseOf(owner));
        expect(
          await store.claim(
            attempt('generation-bind-stale', { fingerprint: 'fp-2' }),
          ),
        ).toEqual({ state: 'claimed' });
      });

      it('is kept by a release of a key bound by a step, for the same request', async () => {
        const first = attempt('generation-bound');
        await store.claim(first);
        await store.saveStep(stepLeaseOf(first), 'charge', 'ch_1', HOUR_MS);
        await store.release(leaseOf(first), true);
        const retry = attempt('generation-bound');
        expect(await store.claim(retry)).toEqual({ state: 'claimed' });
        expect(generationOf(retry)).toBe(generationOf(first));
      });

      it('is new once the key expired: after its record, and after a claim whose time to live ended', async () => {
        const seen = new Set<string>();
        const claimed = async (claim: ClaimRequest) => {
          expect(await store.claim(claim)).toEqual({ state: 'claimed' });
          seen.add(generationOf(claim));
        };
        const completed = attempt('generation-expired', { ttlMs: 0 });
        await claimed(completed);
        await store.complete(
          leaseOf(completed),
          { ...completion, ttlMs: 0 },
          undefined,
        );
        await claimed(attempt('generation-expired', { ttlMs: 0, leaseMs: 0 }));
        await claimed(attempt('generation-expired'));
        expect(seen.size).toBe(3);
      });
    });

    it('collects expired records, and hands the steps of each abandoned key over before deleting them', async () => {
      const expired = attempt('gc-expired');
      await store.claim(expired);
      await store.complete(
        leaseOf(expired),
        { ...completion, ttlMs: 0 },
        undefined,
      );
      const kept = attempt('gc-kept');
      await store.claim(kept);
      await store.complete(leaseOf(kept), completion, undefined);
      // A request that saved two steps and never came back: its lease
      // (400 ms) and its key's time to live (1 ms) over, as are its steps'.
      const abandoned = attempt('gc-abandoned', { leaseMs: 400, ttlMs: 1 });
      const claimedAt = Date.now();
      await store.claim(abandoned);
      await store.saveStep(stepLeaseOf(abandoned), 'charge', { id: 'ch_9' }, 0);
      await store.saveStep(stepLeaseOf(abandoned), 'receipt', 'r-9', 0);
      // The subject: the lease running out.
      await new Promise((resolve) =>
        setTimeout(resolve, Math.max(0, claimedAt + 450 - Date.now())),
      );
      // A request in progress whose steps are alive.
      const alive = attempt('gc-alive');
      await store.claim(alive);
      await store.saveStep(
        stepLeaseOf(alive),
        'charge',
        { id: 'ch_10' },
        HOUR_MS,
      );

      /** Collects everything due, keeping what this test's scope reported. */
      const collectAll = async (onAbandoned?: (key: AbandonedKey) => void) => {
        const reported: AbandonedKey[] = [];
        let removed = 0;
        for (let batch = 0; batch < 100; batch += 1) {
          const result = await store.collect(2, (key) => {
            if (key.scope === scope) {
              onAbandoned?.(key);
              reported.push(key);
            }
          });
          removed += result.removed;
          if (!result.more) {
            break;
          }
        }
        return { reported, removed };
      };
      const sorted = (key: AbandonedKey) => ({
        ...key,
        steps: [...key.steps].sort((a, b) => a.step.localeCompare(b.step)),
      });
      const expected = {
        scope,
        key: 'gc-abandoned',
        steps: [
          { step: 'charge', result: { id: 'ch_9' } },
          { step: 'receipt', result: 'r-9' },
        ],
      };

      // Reported before the deletion: if the report fails, nothing of the
      // key is deleted, and the next collection reports it again.
      await expect(
        collectAll(() => {
          throw new Error('the report did not go through');
        }),
      ).rejects.toThrow('the report did not go through');
      const { reported, removed } = await collectAll();
      expect(reported.map(sorted)).toEqual([expected]);
      // Its two steps at least (the expired record may have gone in the
      // failed collection already: records are collected first).
      expect(removed).toBeGreaterThanOrEqual(2);
      // Collected once: nothing of it is left to report.
      expect((await collectAll()).reported).toEqual([]);

      expect(await store.claim(attempt('gc-expired'))).toEqual({
        state: 'claimed',
      });
      expect(await store.claim(attempt('gc-kept'))).toMatchObject({
        state: 'finished',
      });
      expect(await store.readStep(stepLeaseOf(alive), 'charge')).toEqual({
        result: { id: 'ch_10' },
      });
      // Its key is free again.
      expect(await store.claim(attempt('gc-abandoned'))).toMatchObject({
        state: 'claimed',
      });
    });

    describeAdminConformance(
      {
        store: () => store,
        scope: () => scope,
        attempt,
        leaseOf,
        stepLeaseOf,
        completion,
      },
      capabilities.admin ?? true,
    );
  });
}
