import { randomUUID } from 'node:crypto';
import type {
  AbandonedKey,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';
import { recordIdOf } from './redis-claim.js';
import { RECORD_ID_LENGTH, RedisKeys } from './redis-keys.js';
import { fingerprintLine } from './redis-record.js';
import { parseStep, stepValue } from './redis-step-value.js';
import {
  DROP_STEPS,
  READ_STEP,
  RELEASE_COLLECTING,
  SAVE_STEP,
  UNINDEX,
} from './redis.scripts.js';
import { runScript, type RedisClient } from './redis-client.js';

/**
 * How long a collector holds the keys whose steps it reports (ms): far
 * longer than a batch takes; one that stopped meanwhile leaves them to
 * the next collection after it.
 */
const COLLECTING_LEASE_MS = 60_000;

/**
 * @internal The recovery points (steps) of the Redis store: each key's in
 * a hash beside its record, fenced by the claim's owner, and indexed by
 * expiry in one sorted set, through which the collector finds the steps
 * of requests that never completed.
 */
export class RedisSteps {
  /**
   * @param client the store's client.
   * @param keys the names of the store's keys.
   * @param graceMs how long Redis keeps a key's steps after they expire,
   *   for the collector to report them.
   */
  constructor(
    private readonly client: RedisClient,
    private readonly keys: RedisKeys,
    private readonly graceMs: number,
  ) {}

  /**
   * The step's result, for the claim's owner, if it has not expired and was
   * saved by the same request (fingerprint), or by the previous version of
   * the store (no fingerprint, see `parseStep`).
   */
  async read(
    lease: StepLease,
    step: string,
  ): Promise<{ readonly result: unknown } | undefined> {
    const id = recordIdOf(lease);
    const value = await runScript<string | null>(
      this.client,
      READ_STEP,
      [this.keys.record(id), this.keys.steps(id)],
      [lease.owner, `s:${step}`],
    );
    if (value === null) {
      return undefined;
    }
    const { expiresAt, fingerprint, result } = parseStep(value);
    return expiresAt > Date.now() &&
      (fingerprint === undefined || fingerprint === lease.fingerprint)
      ? { result }
      : undefined;
  }

  /**
   * Saves a step's result with its request's fingerprint, fenced by the
   * owner, and binds the key to that request until the step expires or the
   * key completes (see `SAVE_STEP`, `CLAIM`): released or past its lease,
   * the key is claimed again by the same request only. Nothing is saved
   * for a lease whose fingerprint is not its claim's. Its expiry is the
   * saving instance's clock; the step is indexed by it (in the same round
   * trip) for {@link collect}.
   * @param ttlMs how long the step is kept, in whole ms.
   * @returns whether it was saved.
   */
  async save(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    const id = recordIdOf(lease);
    const expiresAt = Date.now() + ttlMs;
    // Indexed first: an entry without its step is dropped by the collector,
    // a step without its entry would never be reported. The index is not
    // fenced (a Cluster keeps it on another node than the step): GT, so
    // that an owner fenced out never moves an entry before the expiry of
    // the step saved there (the collector would drop the entry, the step
    // unexpired, and never report it); later, it is reported late at most.
    const [, saved] = await Promise.all([
      this.client.zadd(this.keys.stepsIndex, 'GT', expiresAt, `${id}:${step}`),
      runScript<number>(
        this.client,
        SAVE_STEP,
        [this.keys.record(id), this.keys.steps(id), this.keys.generation(id)],
        [
          lease.owner,
          `s:${step}`,
          stepValue(expiresAt, lease.fingerprint, result),
          RedisKeys.identity(lease.scope, lease.key),
          ttlMs + this.graceMs,
          ttlMs,
          fingerprintLine(lease.fingerprint),
        ],
      ),
    ]);
    return saved === 1;
  }

  /**
   * Hands over the steps of keys whose requests never completed, in
   * bounded batches through the index of steps by expiry, each key
   * reported before its steps are deleted.
   * @returns how many steps it deleted, and whether more may be due.
   */
  async collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ readonly removed: number; readonly more: boolean }> {
    const now = Date.now();
    const due = await this.client.zrangebyscore(
      this.keys.stepsIndex,
      '-inf',
      now,
      'WITHSCORES',
      'LIMIT',
      0,
      Math.max(1, batchSize),
    );
    if (due.length === 0) {
      return { removed: 0, more: false };
    }
    const dueIds = [
      ...new Set(
        due
          .filter((_, i) => i % 2 === 0)
          .map((member) => member.slice(0, RECORD_ID_LENGTH)),
      ),
    ];
    // Each key's steps are read, reported and deleted by one collector at a
    // time: the one that holds the key's `collecting` lease, taken before
    // it reads them. Another collecting at once skips the key (what it read
    // of the index may be gone by the time it reads the steps, or not yet).
    const token = randomUUID();
    const held = await Promise.all(
      dueIds.map((id) =>
        this.client.set(
          this.keys.collecting(id),
          token,
          'PX',
          COLLECTING_LEASE_MS,
          'NX',
        ),
      ),
    );
    const ids = dueIds.filter((_, i) => held[i] === 'OK');
    if (ids.length === 0) {
      // All held by other collectors, which go on with them.
      return { removed: 0, more: false };
    }
    const hashes = await Promise.all(
      ids.map((id) => this.client.hgetall(this.keys.steps(id))),
    );
    const reports: AbandonedKey[] = [];
    const drops: Array<{ id: string; pairs: string[] }> = [];
    ids.forEach((id, i) => {
      const hash = hashes[i];
      if (hash.id === undefined) {
        return;
      }
      const [scope, key] = JSON.parse(hash.id) as [string, string];
      const steps: Array<{ step: string; result: unknown }> = [];
      const pairs: string[] = [];
      for (const [field, value] of Object.entries(hash)) {
        if (!field.startsWith('s:')) {
          continue;
        }
        const { expiresAt, result } = parseStep(value);
        if (expiresAt <= now) {
          steps.push({ step: field.slice(2), result });
          pairs.push(field, value);
        }
      }
      if (steps.length > 0) {
        reports.push({ scope, key, steps });
        drops.push({ id, pairs });
      }
    });
    const release = () =>
      Promise.all(
        ids.map((id) =>
          runScript(
            this.client,
            RELEASE_COLLECTING,
            [this.keys.collecting(id)],
            [token],
          ),
        ),
      );
    // Reported before anything is deleted: a report that throws leaves
    // every step to the next collection.
    try {
      for (const report of reports) {
        abandoned(report);
      }
    } catch (error) {
      await release().catch(() => undefined);
      throw error;
    }
    const dropped = await Promise.all(
      drops.map(({ id, pairs }) =>
        runScript<number>(
          this.client,
          DROP_STEPS,
          [this.keys.steps(id)],
          pairs,
        ),
      ),
    );
    // Only the entries of the keys this collection held: another's stay
    // indexed until it has deleted their steps (or, if it stopped, for
    // the next collection).
    const mine = new Set(ids);
    await runScript(
      this.client,
      UNINDEX,
      [this.keys.stepsIndex],
      due.filter((_, i) =>
        mine.has(due[i - (i % 2)].slice(0, RECORD_ID_LENGTH)),
      ),
    );
    await release();
    return {
      removed: dropped.reduce((sum, n) => sum + n, 0),
      more: due.length / 2 >= batchSize,
    };
  }
}
