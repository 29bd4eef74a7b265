import type { OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { RedisOptions } from 'ioredis';
import type {
  AbandonedKey,
  ClaimOutcome,
  ClaimRequest,
  Completion,
  FailureKey,
  FencedWrite,
  ForgottenBatch,
  IdempotencyStore,
  Lease,
  RecordInspection,
  RecordPage,
  RecordQuery,
  Renewal,
  ResetOutcome,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';
import { notReplayable } from '../not-replayable.js';
import { RedisAdmin } from './redis-admin.js';
import {
  RedisClaim,
  claimByScript,
  recordIdOf,
  requestLinesOf,
} from './redis-claim.js';
import { RedisKeys } from './redis-keys.js';
import { RedisPlainCommands } from './redis-plain-commands.js';
import {
  claimValue,
  finishedValueOf,
  requestLines,
  statusLetter,
} from './redis-record.js';
import { RedisSteps } from './redis-steps.js';
import {
  resolveRedisStoreOptions,
  type RedisIdempotencyStoreOptions,
  type ResolvedRedisStoreOptions,
} from './redis-store.options.js';
import { RedisSubscription } from './redis-subscription.js';
import { BIND, COMPLETE, RELEASE, RENEW } from './redis.scripts.js';
import { runScript, connectRedis, type RedisClient } from './redis-client.js';
import { refuseEviction } from './redis-eviction.js';

/** A duration as the commands take it: whole ms, at least 0. */
const ms = (value: number): number => Math.max(0, Math.ceil(value));

/**
 * The claim protocol on Redis 7 or Valkey, through an ioredis client (a
 * single server, Sentinel, or a Cluster) that the application already has,
 * or one built by {@link RedisIdempotencyStore.connect}.
 *
 * Each call is one round trip. A free key is claimed by a plain
 * `SET NX PX GET`, which returns the record holding it otherwise (a replay
 * needs nothing more); completion, release, renewal, binding, steps and a
 * claim of a held key are Lua scripts (sent by SHA1, loaded again when the
 * server lost them), every write fenced by the attempt's owner token. Where the server
 * has `SET … IFEQ` (Valkey 8.1, Redis 8.4), the completion of a claim
 * without steps (an `EXISTS` in the claim's write tells) is that plain
 * command instead, fenced by the claim's value (its owner token in it): the
 * claim's handle (see redis-claim.ts) remembers it. A claim's lease is its
 * key's `PX`, renewed while the handler runs; a finished record expires by
 * `PX`, and by the expiry it carries (stamped by the clock of the instance
 * that completed it) as well: past it, it is taken over even while Redis
 * still holds it. A claim that saved a step, or was bound (`bind()`, or a
 * release that binds), binds its key to its request (I6): its record then
 * carries its lease (by Redis's clock) and outlives it, released or not
 * renewed, until the step expires, the key's generation ends or the key
 * completes, so that the plain `SET NX` of another request finds it and
 * the claim script refuses it, while one of the same request takes it over
 * and resumes (see redis-record.ts); a key that is not bound is claimed,
 * renewed and released by its `PX` alone. The key's generation (I7: what
 * downstream keys are derived from) is a key of its own beside the
 * record, which outlives a claim's lease until the key expires: its
 * `SET NX` goes in the claim's write, and a claim that finds one is the
 * claim script's (see redis.scripts.ts). Every key of a (scope, key)
 * shares one hash slot (its hash tag is a digest of scope and key), so the
 * store runs on a Redis Cluster. The commands of the requests in flight
 * leave in one socket write (see `batchWrites`).
 *
 * The record is not written in the handler's database transaction
 * (`completesInTransaction` is false): at most once holds for handlers whose
 * side effects are not writes to the application's database.
 *
 * @example
 * const store = new RedisIdempotencyStore(redis, { prefix: 'payments:idem:' });
 */
export class RedisIdempotencyStore
  implements IdempotencyStore<unknown>, OnModuleInit, OnApplicationShutdown
{
  /** Always false: the record commits right after the handler, in Redis. */
  readonly completesInTransaction = false;
  /** The options, with their defaults. */
  readonly options: ResolvedRedisStoreOptions;
  private readonly keys: RedisKeys;
  private readonly plain: RedisPlainCommands;
  private readonly steps: RedisSteps;
  private readonly subscription: RedisSubscription;
  private readonly admin: RedisAdmin;
  private ownsClient = false;

  /**
   * @param client the application's ioredis client (`Redis` or `Cluster`):
   *   the store does not close it.
   * @param options prefix and limits; see {@link RedisIdempotencyStoreOptions}.
   * @throws IdempotencyConfigurationError for an invalid option.
   */
  constructor(
    readonly client: RedisClient,
    options: RedisIdempotencyStoreOptions = {},
  ) {
    this.options = resolveRedisStoreOptions(options);
    this.keys = new RedisKeys(this.options.prefix);
    this.plain = new RedisPlainCommands(client, this.keys);
    this.steps = new RedisSteps(
      client,
      this.keys,
      this.options.abandonedStepsGraceMs,
    );
    this.subscription = new RedisSubscription(client, this.keys.channel);
    this.admin = new RedisAdmin(client, this.keys);
  }

  /**
   * A store on a client of its own, built from ioredis options or a URL
   * (loads ioredis only now); {@link close} closes that client. Unless the
   * options say otherwise, `maxRetriesPerRequest: 1` instead of ioredis's
   * 20: while Redis is down, a request gets its `503` within about a second
   * instead of waiting while ioredis reconnects. `enableAutoPipelining` is
   * not needed: the store batches the commands of the requests in flight
   * into one write by itself.
   * @throws IdempotencyConfigurationError when ioredis is not installed;
   *   what its import threw when it is there but fails to load.
   */
  static async connect(
    connection: string | RedisOptions,
    options: RedisIdempotencyStoreOptions = {},
  ): Promise<RedisIdempotencyStore> {
    const settings = resolveRedisStoreOptions(options);
    const store = new RedisIdempotencyStore(
      await connectRedis(connection),
      settings,
    );
    store.ownsClient = true;
    return store;
  }

  /**
   * Refuses, at start, a Redis that evicts keys when its memory is full
   * (see `allowEviction`).
   * @throws IdempotencyConfigurationError for such a Redis.
   */
  async onModuleInit(): Promise<void> {
    if (!this.options.allowEviction) {
      await refuseEviction(this.client);
    }
  }

  /** Whether completions on other instances reach this one now (pub/sub). */
  get watching(): boolean {
    return this.subscription.watching;
  }

  /**
   * One plain `SET NX PX GET` claims a free key, or returns the record that
   * holds it (a finished one is replayed from it), after a `SET NX` of the
   * key's generation in the same write; a claim held by another attempt, a
   * record past its own expiry, or a key that had a generation already
   * (after a crash, or a release that bound it) goes to the claim script
   * (see {@link RedisPlainCommands}). A claim granted comes with the
   * store's handle (a {@link RedisClaim}), for its later calls. The key's
   * generation is kept for the claim's ttl (at least its lease) after the
   * claim.
   */
  async claim(request: ClaimRequest): Promise<ClaimOutcome> {
    const id = RedisKeys.id(request.scope, request.key);
    const lines = requestLines(request);
    const value = claimValue(request.owner, lines, Date.now());
    const leaseMs = ms(request.leaseMs);
    const generationMs = Math.max(ms(request.ttlMs), leaseMs);
    let lease: RedisClaim | undefined;
    if (leaseMs > 0) {
      const outcome = await this.plain.claim(
        request,
        id,
        lines,
        value,
        leaseMs,
        generationMs,
      );
      if (outcome.state !== 'script') {
        return outcome;
      }
      lease = outcome.lease;
    }
    return claimByScript(this.client, this.keys, request, {
      value,
      leaseMs,
      generationMs,
      lease: lease ?? new RedisClaim(request, id, lines),
    });
  }

  async renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    const renewed = await Promise.all(
      leases.map((lease) =>
        runScript<number>(
          this.client,
          RENEW,
          [
            this.keys.record(RedisKeys.id(lease.scope, lease.key)),
            this.keys.generation(RedisKeys.id(lease.scope, lease.key)),
          ],
          [lease.owner, ms(lease.durationMs)],
        ),
      ),
    );
    return new Set(
      leases.filter((_, i) => renewed[i] === 1).map((lease) => lease.owner),
    );
  }

  /**
   * Writes the response into the claimed record, fenced by the owner, and
   * clears the key's steps. `transaction` is ignored. A lease that carries
   * its claim's fingerprint, method and path (the module's leases: the
   * store's handles, or their claim requests) sends the finished record
   * whole; another one lets the script take those lines from the claim.
   * A claim whose handle says it was granted by `SET NX` on a key without
   * steps, and saved none since, completes by one plain
   * `SET … IFEQ <the claim's value>` where the server has it (Valkey 8.1,
   * Redis 8.4), the same fence without a script; when the value changed (a
   * duplicate waits, the lease was taken over), the script decides.
   * A response larger than `maxResponseBytes` is recorded as not
   * replayable, with its status only (as one over the module's
   * `maxResponseSize`).
   */
  async complete(
    lease: Lease,
    completion: Completion,
    _transaction?: unknown,
  ): Promise<FencedWrite> {
    const { response } = completion;
    const stored = 'body' in response ? response : undefined;
    const headers = stored ? JSON.stringify(stored.headers) : '';
    if (stored) {
      const size = stored.body.length + Buffer.byteLength(headers);
      if (size > this.options.maxResponseBytes) {
        return this.complete(lease, notReplayable(completion));
      }
    }
    const id = recordIdOf(lease);
    const ttlMs = ms(completion.ttlMs);
    const now = Date.now();
    const head = `${statusLetter(completion.status)} ${now + ttlMs} ${response.status} ${now}`;
    const lines = requestLinesOf(lease);
    const value =
      lines === undefined
        ? undefined
        : finishedValueOf(head, lines, headers, stored?.body);
    if (await this.plain.complete(lease, id, value, ttlMs)) {
      return { fenced: true, waiting: false };
    }
    const [fenced, waiting] = await runScript<[number, number]>(
      this.client,
      COMPLETE,
      [this.keys.record(id), this.keys.steps(id), this.keys.generation(id)],
      value !== undefined
        ? [lease.owner, value, ttlMs]
        : [lease.owner, head, ttlMs, headers, stored?.body ?? ''],
    );
    return { fenced: fenced === 1, waiting: waiting === 1 };
  }

  /**
   * Gives the claim up, fenced by the owner: the key is free at once, with
   * a new generation for the next claim, unless it is bound to its request
   * (a step, {@link bind}, or `bind` here: see RELEASE).
   */
  async release(lease: Lease, bind = false): Promise<FencedWrite> {
    RedisClaim.take(lease);
    const id = recordIdOf(lease);
    const [fenced, waiting] = await runScript<[number, number]>(
      this.client,
      RELEASE,
      [this.keys.record(id), this.keys.generation(id)],
      [lease.owner, bind ? '1' : '0'],
    );
    return { fenced: fenced === 1, waiting: waiting === 1 };
  }

  /**
   * Binds the key to the claim's request, fenced by the owner, until the
   * key's generation ends (see BIND): released, taken over or lost with
   * its instance, the claim goes to the same request only, in the same
   * generation. One script.
   */
  async bind(lease: StepLease, holdMs = 0): Promise<boolean> {
    // Its record changes: a completion by SET IFEQ would find it changed.
    RedisClaim.take(lease);
    const id = recordIdOf(lease);
    return (
      (await runScript<number>(
        this.client,
        BIND,
        [this.keys.record(id), this.keys.generation(id)],
        [lease.owner, ms(holdMs)],
      )) === 1
    );
  }

  /**
   * Counts a failed attempt: `INCR` and `PEXPIRE` of the key's count, and
   * the key's identity kept as long (for a forget of its scope), in one
   * transaction (one slot); a count that expired starts again.
   */
  async countFailure(key: FailureKey, ttlMs: number): Promise<number> {
    const id = RedisKeys.id(key.scope, key.key);
    const name = this.keys.failures(id);
    const replies = await this.client
      .multi()
      .incr(name)
      .pexpire(name, Math.ceil(ttlMs))
      .set(
        this.keys.identity(id),
        RedisKeys.identity(key.scope, key.key),
        'PX',
        Math.ceil(ttlMs),
      )
      .exec();
    const [error, count] = replies?.[0] ?? [new Error('MULTI was discarded')];
    if (error) {
      throw error;
    }
    return Number(count);
  }

  /** Deletes the key's count (its identity expires with it). */
  async forgetFailures(key: FailureKey): Promise<void> {
    await this.client.del(this.keys.failures(RedisKeys.id(key.scope, key.key)));
  }

  /** Publishes each key's completion on the store's channel. */
  async notify(leases: readonly Lease[]): Promise<void> {
    await Promise.all(
      leases.map((lease) =>
        this.client.publish(
          this.keys.channel,
          RedisKeys.identity(lease.scope, lease.key),
        ),
      ),
    );
  }

  /**
   * Subscribes (once, on a connection of its own duplicated from the
   * client) to the completions other instances publish. After a
   * reconnection, calls `listener` without arguments: messages were missed.
   */
  watch(listener: (scope?: string, key?: string) => void): void {
    this.subscription.watch(listener);
  }

  /**
   * The step's result, for the claim's owner, if it has not expired and was
   * saved by the same request (fingerprint), or by the previous version of
   * the store (no fingerprint).
   */
  readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ readonly result: unknown } | undefined> {
    return this.steps.read(lease, step);
  }

  /**
   * Saves a step's result with its request's fingerprint, fenced by the
   * owner, and binds the key to that request until the step expires or the
   * key completes: released or past its lease, the key is claimed again by
   * the same request only. Nothing is saved for a lease whose fingerprint
   * is not its claim's. Its expiry is the saving instance's clock.
   */
  saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    // Whether or not it is saved (its reply may be lost while it is): the
    // completion is then the script's, which clears the key's steps.
    RedisClaim.take(lease);
    return this.steps.save(lease, step, result, ms(ttlMs));
  }

  /**
   * Redis deletes expired records by itself (PX): this hands over the steps
   * of keys whose requests never completed, in bounded batches through the
   * index of steps by expiry, each key reported before its steps are
   * deleted.
   * @returns how many steps it deleted, and whether more may be due.
   */
  collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ readonly removed: number; readonly more: boolean }> {
    return this.steps.collect(batchSize, abandoned);
  }

  /**
   * Reads a record, its generation and its steps in one script. A record
   * written by a previous version of the store (whose value names no scope
   * and key) is read too; it shows no creation time.
   */
  inspectRecord(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined> {
    return this.admin.inspect(scope, key, withBody);
  }

  /**
   * Lists records by SCAN over the store's record keys (on every master of
   * a Cluster), each read by a script: in SCAN order, not sorted. A record
   * written by a previous version of the store names no scope: it is not
   * listed. A record's creation time is its last claim's, by the claiming
   * instance's clock.
   */
  listRecords(query: RecordQuery): Promise<RecordPage> {
    return this.admin.list(query);
  }

  /** Ends a record in one script (see RESET_RECORD). */
  resetRecord(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome> {
    return this.admin.reset(scope, key, force);
  }

  /**
   * Deletes a key, or the keys of a scope found by SCAN, with their steps,
   * generations and counts of failures, one script per key (see
   * FORGET_RECORD): Redis holds nothing between two.
   */
  forgetRecords(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    return this.admin.forget(scope, key, batchSize);
  }

  /** Closes the subscription, and the client when the store built it. */
  async close(): Promise<void> {
    await Promise.all([
      this.subscription.close(),
      this.ownsClient
        ? this.client.quit().catch(() => this.client.disconnect())
        : undefined,
    ]);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }

  /**
   * @internal The subscription's connection, if open: a test drops it to
   * see the store subscribe again.
   */
  protected get subscriber(): RedisClient | undefined {
    return this.subscription.connection;
  }
}
