import {
  IdempotencyAdmin,
  IdempotencyAdminError,
  IdempotencyAdminInputError,
  IdempotencyAdminUnsupportedError,
  IdempotencyLeaseHeldError,
  IdempotencyRecordNotFoundError,
} from '../../src/index.js';
import type {
  ClaimRequest,
  Completion,
  IdempotencyStore,
  Lease,
  StepLease,
} from '../../src/interfaces/idempotency-store.interface.js';
import { encodeCursor } from '../../src/stores/record-cursor.js';
import { generationOf } from '../utils/store-handles.js';

/** What the conformance suite hands its admin part: the store and its helpers. */
export interface AdminConformanceContext {
  readonly store: () => IdempotencyStore;
  readonly scope: () => string;
  readonly attempt: (
    key: string,
    overrides?: Partial<ClaimRequest>,
  ) => ClaimRequest;
  readonly leaseOf: (claim: Lease) => Lease;
  readonly stepLeaseOf: (claim: ClaimRequest) => StepLease;
  readonly completion: Completion;
}

const HOUR_MS = 3_600_000;

/** The message of the input error `operation` is refused with. */
async function refusal(operation: () => Promise<unknown>): Promise<string> {
  const error = await operation().then(
    () => new Error('It was not refused'),
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(IdempotencyAdminInputError);
  return (error as Error).message;
}

/**
 * The store's operator operations (`inspectRecord`, `listRecords`,
 * `resetRecord`, `forgetRecords`), through `IdempotencyAdmin`; for a store
 * without them, the admin's refusal.
 */
export function describeAdminConformance(
  context: AdminConformanceContext,
  supported: boolean,
): void {
  const { attempt, leaseOf, stepLeaseOf, completion } = context;
  const admin = () => new IdempotencyAdmin(context.store());

  if (!supported) {
    it('admin: refuses each operation clearly, naming what the store lacks', async () => {
      const scope = context.scope();
      await expect(admin().inspect('k', scope)).rejects.toThrow(
        IdempotencyAdminUnsupportedError,
      );
      await expect(admin().list()).rejects.toThrow(/listRecords/);
      await expect(admin().reset('k', scope)).rejects.toThrow(/resetRecord/);
      await expect(admin().forget(scope)).rejects.toThrow(/forgetRecords/);
    });
    return;
  }

  it('admin: inspects a claim (owner, lease, generation) and a completed record (response, body on request, steps)', async () => {
    const scope = context.scope();
    const started = Date.now();
    const claim = attempt('inspected', { leaseMs: 60_000 });
    await context.store().claim(claim);
    expect(
      await context
        .store()
        .saveStep(stepLeaseOf(claim), 'charge', { id: 'ch_1' }, HOUR_MS),
    ).toBe(true);
    const running = await admin().inspect('inspected', scope);
    expect(running).toMatchObject({
      scope,
      key: 'inspected',
      status: 'in_progress',
      fingerprint: 'fp-1',
      owner: claim.owner,
      generation: generationOf(claim),
      bound: true,
      response: undefined,
    });
    expect(running.leaseMs).toBeGreaterThan(50_000);
    expect(running.leaseMs).toBeLessThanOrEqual(60_000);
    expect(running.expiresAt.getTime()).toBeGreaterThanOrEqual(
      started + HOUR_MS - 1_000,
    );
    expect(running.steps.map((step) => step.step)).toEqual(['charge']);
    expect(running.steps[0].expiresAt.getTime()).toBeGreaterThan(started);

    await context.store().complete(leaseOf(claim), completion, undefined);
    const done = await admin().inspect('inspected', scope);
    expect(done).toMatchObject({
      status: 'completed',
      owner: undefined,
      // Replayed: no longer bound to a request that must run it.
      bound: false,
      response: {
        status: 201,
        headers: {
          'content-type': 'application/json; charset=utf-8',
          'x-request-trace': ['a', 'b'],
        },
      },
    });
    expect(done.response).not.toHaveProperty('body');
    expect(done.completedAt!.getTime()).toBeGreaterThanOrEqual(started - 1_000);
    const withBody = await admin().inspect('inspected', scope, { body: true });
    expect(withBody.response?.body).toEqual(
      Buffer.from([0x7b, 0x7d, 0x00, 0xff]),
    );

    await expect(admin().inspect('none', scope)).rejects.toThrow(
      IdempotencyRecordNotFoundError,
    );
    await expect(admin().inspect('', scope)).rejects.toThrow(
      IdempotencyAdminError,
    );
  });

  it('admin: lists in-progress claims and failed records of a scope, paged by cursor', async () => {
    const scope = context.scope();
    const store = context.store();
    for (const key of ['a', 'b', 'c']) {
      await store.claim(attempt(key));
    }
    const failed = attempt('d');
    await store.claim(failed);
    await store.complete(
      leaseOf(failed),
      { ...completion, status: 'failed' },
      undefined,
    );
    const done = attempt('e');
    await store.claim(done);
    await store.complete(leaseOf(done), completion, undefined);

    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await admin().list({ scope, limit: 2, cursor });
      seen.push(...page.records.map((r) => `${r.key}:${r.status}`));
      expect(page.records.every((r) => r.scope === scope)).toBe(true);
      cursor = page.cursor;
      pages += 1;
    } while (cursor !== undefined && pages < 10);
    expect(seen.sort()).toEqual([
      'a:in_progress',
      'b:in_progress',
      'c:in_progress',
      'd:failed',
    ]);
    expect(
      (await admin().list({ scope, status: 'completed' })).records.map(
        (r) => r.key,
      ),
    ).toEqual(['e']);
    expect(
      (await admin().list({ scope, olderThan: new Date(Date.now() - HOUR_MS) }))
        .records,
    ).toEqual([]);
    // Instants no store's timestamps reach (PostgreSQL's end at 4713 BC):
    // none older than the earliest, all older than the latest.
    expect(
      (await admin().list({ scope, olderThan: new Date(-8.64e15) })).records,
    ).toEqual([]);
    expect(
      (
        await admin().list({
          scope,
          status: 'completed',
          olderThan: new Date(8.64e15),
        })
      ).records.map((r) => r.key),
    ).toEqual(['e']);
    await expect(admin().list({ limit: 0 })).rejects.toThrow(/limit/);
    // Refused alike on every store: not a cursor at all, an empty one, and
    // cursors of the right encoding but of no page (no position, too many
    // parts), which a store would otherwise read as the first page, or
    // send on to its server.
    for (const cursor of [
      'not a cursor',
      '',
      encodeCursor([]),
      encodeCursor(['a', 'b', 'c', 'd']),
    ]) {
      await expect(admin().list({ cursor })).rejects.toThrow(
        IdempotencyAdminInputError,
      );
    }
  });

  it('admin: refuses a cursor, a scope or a key holding a NUL character as an input error, on every store alike, and changes nothing', async () => {
    const scope = context.scope();
    const store = context.store();
    const done = attempt('kept');
    await store.claim(done);
    await store.complete(leaseOf(done), completion, undefined);
    const nul = 'kept\u0000';
    // Of every store's number of parts: one of them is its own, the
    // others refused already as of no page.
    for (const parts of [1, 2, 3]) {
      const cursor = encodeCursor(Array.from({ length: parts }, () => nul));
      expect(await refusal(() => admin().list({ scope, cursor }))).toEqual(
        `The cursor "${cursor}" is not one that a page of records returned.`,
      );
    }
    const refusals: Array<[string, () => Promise<unknown>]> = [
      ['key', () => admin().inspect(nul, scope)],
      ['scope', () => admin().inspect('kept', `${scope}\u0000`)],
      ['key', () => admin().reset(nul, scope, { force: true })],
      ['scope', () => admin().forget(`${scope}\u0000`)],
      ['key', () => admin().forget(scope, { key: nul })],
      ['scope', () => admin().list({ scope: `${scope}\u0000` })],
    ];
    for (const [what, operation] of refusals) {
      expect(await refusal(operation)).toEqual(
        `The ${what} must not hold a NUL character (\\u0000).`,
      );
    }
    expect(await admin().inspect('kept', scope)).toMatchObject({
      status: 'completed',
    });
  });

  it('admin: refuses a cursor, a scope or a key that is not well-formed Unicode (a lone surrogate) as an input error, on every store alike, never reaching the record with U+FFFD in its place', async () => {
    const scope = context.scope();
    const store = context.store();
    // Where PostgreSQL's driver would write a lone surrogate: U+FFFD.
    const done = attempt('kept\uFFFD');
    await store.claim(done);
    await store.complete(leaseOf(done), completion, undefined);
    const lone = 'kept\uD800';
    for (const parts of [1, 2, 3]) {
      const cursor = encodeCursor(Array.from({ length: parts }, () => lone));
      expect(await refusal(() => admin().list({ scope, cursor }))).toEqual(
        `The cursor "${cursor}" is not one that a page of records returned.`,
      );
    }
    const refusals: Array<[string, () => Promise<unknown>]> = [
      ['key', () => admin().inspect(lone, scope)],
      ['scope', () => admin().inspect('kept', `${scope}\uDC00`)],
      ['key', () => admin().reset(lone, scope, { force: true })],
      ['scope', () => admin().forget(`${scope}\uD800`)],
      ['key', () => admin().forget(scope, { key: lone })],
      ['scope', () => admin().list({ scope: `${scope}\uD800` })],
    ];
    for (const [what, operation] of refusals) {
      expect(await refusal(operation)).toEqual(
        `The ${what} must be well-formed Unicode, without a lone surrogate.`,
      );
    }
    expect(await admin().inspect('kept\uFFFD', scope)).toMatchObject({
      status: 'completed',
    });
  });

  it('admin: a reset refused while the owner holds a live lease; forced, the owner is fenced out and the next request runs once', async () => {
    const scope = context.scope();
    const store = context.store();
    const owner = attempt('stuck');
    expect(await store.claim(owner)).toEqual({ state: 'claimed' });
    await expect(admin().reset('stuck', scope)).rejects.toThrow(
      IdempotencyLeaseHeldError,
    );
    // Refused: the owner still completes.
    expect(await admin().inspect('stuck', scope)).toMatchObject({
      owner: owner.owner,
    });

    expect(await admin().reset('stuck', scope, { force: true })).toEqual({
      fenced: true,
    });
    // The old owner's writes find no claim of theirs.
    expect(
      await store.complete(leaseOf(owner), completion, undefined),
    ).toMatchObject({ fenced: false });
    expect(await store.release(leaseOf(owner))).toMatchObject({
      fenced: false,
    });
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, () => store.claim(attempt('stuck'))),
    );
    expect(outcomes.filter((o) => o.state === 'claimed')).toHaveLength(1);
    await expect(admin().reset('absent', scope)).rejects.toThrow(
      IdempotencyRecordNotFoundError,
    );
  });

  it('admin: a reset of a finished record lets its key run again; of a claim bound by a step, keeps the request and its generation, as a takeover does', async () => {
    const scope = context.scope();
    const store = context.store();
    const first = attempt('finished');
    await store.claim(first);
    await store.complete(leaseOf(first), completion, undefined);
    expect(await admin().reset('finished', scope)).toEqual({ fenced: false });
    const again = attempt('finished', { fingerprint: 'fp-2' });
    expect(await store.claim(again)).toEqual({ state: 'claimed' });

    const bound = attempt('bound', { leaseMs: 60_000 });
    await store.claim(bound);
    await store.saveStep(stepLeaseOf(bound), 'charge', 'ch_1', HOUR_MS);
    expect(await admin().reset('bound', scope, { force: true })).toEqual({
      fenced: true,
    });
    expect(
      await store.saveStep(stepLeaseOf(bound), 'refund', 'x', HOUR_MS),
    ).toBe(false);
    expect(
      await store.claim(attempt('bound', { fingerprint: 'fp-2' })),
    ).toMatchObject({ state: 'in_progress', fingerprint: 'fp-1' });
    const resumed = attempt('bound');
    expect(await store.claim(resumed)).toEqual({ state: 'claimed' });
    expect(generationOf(resumed)).toBe(generationOf(bound));
    expect(await store.readStep(stepLeaseOf(resumed), 'charge')).toEqual({
      result: 'ch_1',
    });
  });

  it("admin: a forced reset of a live claim keeps its key's generation, as a takeover does: the same request, retried, derives the keys it may have sent downstream", async () => {
    const scope = context.scope();
    const store = context.store();
    // An attempt that derived a key (not bound: no step) and hangs.
    const hung = attempt('derived', { leaseMs: 60_000 });
    expect(await store.claim(hung)).toEqual({ state: 'claimed' });
    expect(await admin().reset('derived', scope, { force: true })).toEqual({
      fenced: true,
    });
    expect(
      await store.complete(leaseOf(hung), completion, undefined),
    ).toMatchObject({ fenced: false });
    // Free at once, for any request; the same one keeps the generation.
    const retried = attempt('derived');
    expect(await store.claim(retried)).toEqual({ state: 'claimed' });
    expect(generationOf(retried)).toBe(generationOf(hung));
  });

  it('admin: forgets every record and step of a scope in batches, and one key alone, leaving other scopes', async () => {
    const scope = context.scope();
    const store = context.store();
    const other = attempt('kept', { scope: `${scope}:other` });
    await store.claim(other);
    for (let i = 0; i < 7; i += 1) {
      const claim = attempt(`k${i}`);
      await store.claim(claim);
      if (i % 2 === 0) {
        await store.saveStep(stepLeaseOf(claim), 'charge', i, HOUR_MS);
      } else {
        await store.complete(leaseOf(claim), completion, undefined);
      }
    }
    const running = attempt('k0');
    expect(await admin().forget(scope, { key: 'k1' })).toEqual({
      records: 1,
      steps: 0,
    });
    const batches: number[] = [];
    let previous = 0;
    const forgotten = await admin().forget(scope, {
      batchSize: 3,
      onBatch: ({ records, steps }) => {
        batches.push(records + steps - previous);
        previous = records + steps;
      },
    });
    expect(forgotten).toEqual({ records: 6, steps: 4 });
    expect(Math.max(...batches)).toBeLessThanOrEqual(3);
    expect(batches.length).toBeGreaterThanOrEqual(4);
    expect(
      (
        await admin().list({
          scope,
          status: ['in_progress', 'completed', 'failed', 'not_replayable'],
        })
      ).records,
    ).toEqual([]);
    expect(await store.claim(running)).toEqual({ state: 'claimed' });
    expect(await store.readStep(stepLeaseOf(running), 'charge')).toBe(
      undefined,
    );
    expect(await admin().inspect('kept', `${scope}:other`)).toMatchObject({
      owner: other.owner,
    });
    await expect(admin().forget(scope, { batchSize: 0 })).rejects.toThrow(
      /batchSize/,
    );
  });

  it("admin: a reset starts the key's count of failed attempts anew (of a finished record, a forced claim), not while refused (a live lease, no record), nor another key's", async () => {
    const scope = context.scope();
    const store = context.store();
    const count = (key: string) => store.countFailure!({ scope, key }, HOUR_MS);
    const finished = attempt('failing-finished');
    await store.claim(finished);
    await store.complete(leaseOf(finished), completion, undefined);
    const held = attempt('failing-held', { leaseMs: 60_000 });
    await store.claim(held);
    for (const key of ['failing-finished', 'failing-held', 'failing-free']) {
      await count(key);
      await count(key);
    }
    await count('other');

    expect(await admin().reset('failing-finished', scope)).toEqual({
      fenced: false,
    });
    await expect(admin().reset('failing-held', scope)).rejects.toThrow(
      IdempotencyLeaseHeldError,
    );
    await expect(admin().reset('failing-free', scope)).rejects.toThrow(
      IdempotencyRecordNotFoundError,
    );
    expect(await count('failing-finished')).toBe(1);
    expect(await count('failing-held')).toBe(3);
    expect(await count('failing-free')).toBe(3);
    expect(await admin().reset('failing-held', scope, { force: true })).toEqual(
      { fenced: true },
    );
    expect(await count('failing-held')).toBe(1);
    expect(await count('other')).toBe(2);
  });

  it("admin: a forget deletes the failure counts of what it forgets (a key's alone, a scope's: of a claim's key and of a released one's), not another scope's", async () => {
    const scope = context.scope();
    const store = context.store();
    const count = (key: string, of = scope) =>
      store.countFailure!({ scope: of, key }, HOUR_MS);
    const held = attempt('held');
    await store.claim(held);
    const released = attempt('released');
    await store.claim(released);
    await store.release(leaseOf(released));
    for (const key of ['held', 'released', 'released', 'alone']) {
      await count(key);
    }
    expect(await count('released', `${scope}:other`)).toBe(1);

    expect(await admin().forget(scope, { key: 'alone' })).toEqual({
      records: 0,
      steps: 0,
    });
    expect(await count('alone')).toBe(1);
    expect(await count('held')).toBe(2);
    expect(await admin().forget(scope, { batchSize: 1 })).toEqual({
      records: 1,
      steps: 0,
    });
    for (const key of ['held', 'released', 'alone']) {
      expect(await count(key)).toBe(1);
    }
    expect(await count('released', `${scope}:other`)).toBe(2);
  });
}
