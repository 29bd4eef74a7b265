import { Logger, type OnApplicationShutdown } from '@nestjs/common';
import type { RedisOptions } from 'ioredis';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import type {
  AbandonedKey,
  ClaimOutcome,
  ClaimRequest,
  Completion,
  FencedWrite,
  IdempotencyStore,
  Lease,
  Renewal,
  StepLease,
} from '../../interfaces/idempotency-store.interface.js';
import { notReplayable } from '../not-replayable.js';
import { RECORD_ID_LENGTH, RedisKeys } from './redis-keys.js';
import {
  decodeRecord,
  finishedValue,
  fingerprintLine,
  inProgressValue,
  statusLetter,
} from './redis-record.js';
import {
  resolveRedisStoreOptions,
  type RedisIdempotencyStoreOptions,
  type ResolvedRedisStoreOptions,
} from './redis-store.options.js';
import {
  CLAIM,
  COMPLETE,
  DROP_STEPS,
  READ_STEP,
  RELEASE,
  RENEW,
  SAVE_STEP,
  UNINDEX,
  batchWrites,
  runScript,
  runScriptBuffer,
  type RedisClient,
} from './redis.scripts.js';

/** The claim script's reply: {1}, or {0, the record, lease ms left}. */
type ClaimReply = [1] | [0, Buffer, number?];

/** `SET` with options that ioredis's types do not list (`IFEQ`). */
interface PlainSet {
  set(...args: Array<string | Buffer | number>): Promise<string | null>;
}

/** Whether `error` is the server refusing `SET … IFEQ` (Redis before 8.4, Valkey before 8.1). */
function refusesIfEq(error: unknown): boolean {
  return error instanceof Error && /^ERR syntax error/i.test(error.message);
}

const CLAIMED: ClaimOutcome = { state: 'claimed' };

/**
 * A step's stored value: its expiry (ms since the epoch), a space, the
 * fingerprint of the request that saved it (JSON), a newline, its JSON.
 */
function stepValue(
  expiresAt: number,
  fingerprint: string,
  result: unknown,
): string {
  return `${expiresAt} ${fingerprintLine(fingerprint)}\n${JSON.stringify(result ?? null)}`;
}

/**
 * Reads a step's stored value. One saved by the previous version of the
 * store is its expiry, a space and its JSON, without a fingerprint (JSON
 * never holds a raw newline): its `fingerprint` is undefined, and any
 * request of its key reads it, as it did then (backward compatible).
 */
function parseStep(value: string): {
  readonly expiresAt: number;
  readonly fingerprint: string | undefined;
  readonly result: unknown;
} {
  const at = value.indexOf(' ');
  const line = value.indexOf('\n', at + 1);
  return {
    expiresAt: Number(value.slice(0, at)),
    fingerprint:
      line < 0 ? undefined : (JSON.parse(value.slice(at + 1, line)) as string),
    result: JSON.parse(value.slice(line < 0 ? at + 1 : line + 1)) as unknown,
  };
}

const ms = (value: number): number => Math.max(0, Math.ceil(value));

/**
 * The claim protocol on Redis 7 or Valkey, through an ioredis client (a
 * single server, Sentinel, or a Cluster) that the application already has,
 * or one built by {@link RedisIdempotencyStore.connect}.
 *
 * Each call is one round trip. A free key is claimed by a plain
 * `SET NX PX GET`, which returns the record holding it otherwise (a replay
 * needs nothing more); completion, release, renewal, steps and a claim of a
 * held key are Lua scripts (sent by SHA1, loaded again when the server lost
 * them), every write fenced by the attempt's owner token. Where the server
 * has `SET … IFEQ` (Valkey 8.1, Redis 8.4), the completion of a claim
 * without steps (an `EXISTS` in the claim's write tells) is that plain
 * command instead, fenced by the claim's value (its owner token in it). A
 * claim's lease is its key's `PX`, renewed while the handler runs; a
 * finished record expires by `PX`, and by the expiry it carries (stamped
 * by the clock of the instance that completed it) as well: past it, it is
 * taken over even while Redis still holds it. A claim that saved a step
 * binds its key to its request (I6): its record then carries its lease
 * (by Redis's clock) and outlives it, released or not renewed, until the
 * step expires or the key completes, so that the plain `SET NX` of another
 * request finds it and the claim script refuses it, while one of the same
 * request takes it over and resumes (see redis-record.ts); a key without
 * steps is claimed, renewed and released as before. Every key of a (scope, key)
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
  implements IdempotencyStore<unknown>, OnApplicationShutdown
{
  /** Always false: the record commits right after the handler, in Redis. */
  readonly completesInTransaction = false;
  /** The options, with their defaults. */
  readonly options: ResolvedRedisStoreOptions;
  private readonly keys: RedisKeys;
  private readonly logger = new Logger('Idempotency');
  private readonly listeners: Array<(scope?: string, key?: string) => void> =
    [];
  /**
   * Claims (their requests, which are their leases) granted by `SET NX` on
   * a key without steps, that saved none since: such a claim completes by
   * `SET … IFEQ` of the value its request writes, where the server has it.
   */
  private readonly stepless = new WeakSet<object>();
  /**
   * Whether the server has `SET … IFEQ` (Valkey 8.1, Redis 8.4): unknown
   * until a completion tries it, false once one was refused.
   */
  private compareAndSet: boolean | undefined;
  private subscriber: RedisClient | undefined;
  private subscribed = false;
  private closed = false;
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
  }

  /**
   * A store on a client of its own, built from ioredis options or a URL
   * (loads ioredis only now); {@link close} closes that client. Unless the
   * options say otherwise, `maxRetriesPerRequest: 1` instead of ioredis's
   * 20: while Redis is down, a request gets its `503` within about a second
   * instead of waiting while ioredis reconnects (10 s to 43 s in the fault
   * tests). `enableAutoPipelining` is not needed: the store batches the
   * commands of the requests in flight into one write by itself.
   * @throws IdempotencyConfigurationError when ioredis is not installed.
   */
  static async connect(
    connection: string | RedisOptions,
    options: RedisIdempotencyStoreOptions = {},
  ): Promise<RedisIdempotencyStore> {
    const settings = resolveRedisStoreOptions(options);
    let Redis: typeof import('ioredis').Redis;
    try {
      ({ Redis } = await import('ioredis'));
    } catch {
      throw new IdempotencyConfigurationError(
        'The Redis store needs the ioredis package, which is not installed.',
        'Install it: `npm install ioredis`.',
      );
    }
    const defaults = { maxRetriesPerRequest: 1 };
    const client =
      typeof connection === 'string'
        ? new Redis(connection, defaults)
        : new Redis({ ...defaults, ...connection });
    const store = new RedisIdempotencyStore(client, settings);
    store.ownsClient = true;
    return store;
  }

  /** Whether completions on other instances reach this one now (pub/sub). */
  get watching(): boolean {
    return this.subscribed;
  }

  /**
   * One plain `SET NX PX GET` claims a free key, or returns the record that
   * holds it (a finished one is replayed from it); a claim held by another
   * attempt, or a record past its own expiry, goes to the claim script.
   */
  async claim(request: ClaimRequest): Promise<ClaimOutcome> {
    const id = RedisKeys.id(request.scope, request.key);
    const record = this.keys.record(id);
    const value = inProgressValue(
      request.owner,
      request.fingerprint,
      request.method,
      request.path,
    );
    const leaseMs = ms(request.leaseMs);
    if (leaseMs > 0) {
      batchWrites(this.client);
      const claimed = this.client.setBuffer(
        record,
        value,
        'PX',
        leaseMs,
        'NX',
        'GET',
      );
      // In the same write: whether the key has steps (of an attempt whose
      // lease ran out). None can be saved now but by this attempt, whose
      // claim fences every other owner's. Sent with every claim (a replay
      // too) rather than once a claim is granted: in a write of its own, it
      // would cost Redis and the application a read and a write more
      // (measured on Valkey 8.1 with a handler that answers at once: 45 µs
      // against 22 µs more main-thread CPU a request than
      // @node-idempotency/nestjs, 8.5 against 4.5 µs more of Redis's).
      // Not sent where the server has no SET IFEQ: there, a compare-and-set
      // by a script (a GET and a SET, no string made in Lua) in place of
      // the completion script saves Redis 7.0 no more than the EXISTS costs
      // the application (measured: the store's claim and completion, ten at
      // a time, alternating rounds: 2.7 µs less of Redis's CPU, 2.7 µs more
      // of the application's); on Valkey 8.1, SET IFEQ saves Redis 15 µs
      // against the completion script, for 1.5 µs of the application's.
      const steps =
        this.compareAndSet === false
          ? undefined
          : this.client.exists(this.keys.steps(id)).catch(() => undefined);
      const held = await claimed;
      if (held === null) {
        if (steps && (await steps) === 0) {
          this.stepless.add(request);
        }
        return CLAIMED;
      }
      const found = decodeRecord(held);
      // Its claim sent again (see CLAIM). A claim bound by a step holds
      // its lease in its value: the script tells whether it still holds.
      if (
        found.state === 'in_progress' &&
        !found.bound &&
        found.owner === request.owner
      ) {
        return CLAIMED;
      }
      if (found.state === 'finished' && found.expiresAt > Date.now()) {
        return { state: 'finished', record: found.record };
      }
    }
    const reply = await runScriptBuffer<ClaimReply>(
      this.client,
      CLAIM,
      [record],
      [
        request.owner,
        value,
        leaseMs,
        request.wait ? '1' : '0',
        fingerprintLine(request.fingerprint),
        Date.now(),
      ],
    );
    if (reply[0] === 1) {
      return CLAIMED;
    }
    const found = decodeRecord(reply[1]);
    return found.state === 'in_progress'
      ? {
          state: 'in_progress',
          fingerprint: found.fingerprint,
          leaseMs: Math.max(0, Number(reply[2] ?? 0)),
        }
      : { state: 'finished', record: found.record };
  }

  async renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    const renewed = await Promise.all(
      leases.map((lease) =>
        runScript<number>(
          this.client,
          RENEW,
          [this.keys.record(RedisKeys.id(lease.scope, lease.key))],
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
   * its claim's fingerprint, method and path (the module's leases are their
   * claim requests) sends the finished record whole; another one lets the
   * script take those lines from the claim. A claim this store granted by
   * `SET NX`, on a key without steps, completes by one plain
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
    const id = RedisKeys.id(lease.scope, lease.key);
    const record = this.keys.record(id);
    const ttlMs = ms(completion.ttlMs);
    const head = `${statusLetter(completion.status)} ${Date.now() + ttlMs} ${response.status}`;
    const claimed = lease as Partial<ClaimRequest>;
    const request =
      claimed.fingerprint !== undefined &&
      claimed.method !== undefined &&
      claimed.path !== undefined
        ? (claimed as ClaimRequest)
        : undefined;
    const value = request
      ? finishedValue(head, request, headers, stored?.body)
      : undefined;
    const stepless = this.stepless.delete(lease);
    if (
      request &&
      value !== undefined &&
      stepless &&
      ttlMs > 0 &&
      this.compareAndSet !== false &&
      (await this.setIfEqual(
        record,
        value,
        ttlMs,
        inProgressValue(
          request.owner,
          request.fingerprint,
          request.method,
          request.path,
        ),
      ))
    ) {
      return { fenced: true, waiting: false };
    }
    const [fenced, waiting] = await runScript<[number, number]>(
      this.client,
      COMPLETE,
      [record, this.keys.steps(id)],
      value !== undefined
        ? [lease.owner, value, ttlMs]
        : [lease.owner, head, ttlMs, headers, stored?.body ?? ''],
    );
    return { fenced: fenced === 1, waiting: waiting === 1 };
  }

  /**
   * `SET key value PX ttlMs IFEQ expected`: whether it wrote. False, and
   * never tried again, where the server refuses the option.
   */
  private async setIfEqual(
    key: string,
    value: string | Buffer,
    ttlMs: number,
    expected: string,
  ): Promise<boolean> {
    batchWrites(this.client);
    try {
      const reply = await (this.client as unknown as PlainSet).set(
        key,
        value,
        'PX',
        ttlMs,
        'IFEQ',
        expected,
      );
      this.compareAndSet = true;
      return reply === 'OK';
    } catch (error) {
      if (!refusesIfEq(error)) {
        throw error;
      }
      this.compareAndSet = false;
      return false;
    }
  }

  async release(lease: Lease): Promise<FencedWrite> {
    this.stepless.delete(lease);
    const id = RedisKeys.id(lease.scope, lease.key);
    const [fenced, waiting] = await runScript<[number, number]>(
      this.client,
      RELEASE,
      [this.keys.record(id)],
      [lease.owner],
    );
    return { fenced: fenced === 1, waiting: waiting === 1 };
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
    this.listeners.push(listener);
    if (this.subscriber || this.closed) {
      return;
    }
    const subscriber = this.client.duplicate();
    this.subscriber = subscriber;
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.keys.channel) {
        return;
      }
      let identity: unknown;
      try {
        identity = JSON.parse(message);
      } catch {
        return;
      }
      if (
        Array.isArray(identity) &&
        typeof identity[0] === 'string' &&
        typeof identity[1] === 'string'
      ) {
        for (const watcher of this.listeners) {
          watcher(identity[0], identity[1]);
        }
      }
    });
    const lost = () => {
      this.subscribed = false;
    };
    subscriber.on('close', lost);
    subscriber.on('reconnecting', lost);
    subscriber.on('error', (error: Error) =>
      this.logger.warn(
        `The Redis subscription of completions failed (waiters poll): ${error.message}`,
      ),
    );
    subscriber.on('ready', () => void this.subscribe(subscriber));
    void this.subscribe(subscriber);
  }

  private async subscribe(subscriber: RedisClient): Promise<void> {
    try {
      await subscriber.subscribe(this.keys.channel);
    } catch (error) {
      this.logger.warn(
        `Subscribing to the completions failed (waiters poll): ${(error as Error).message}`,
      );
      return;
    }
    if (this.subscriber !== subscriber || this.subscribed) {
      return;
    }
    this.subscribed = true;
    // Anything may have completed while the subscription was down.
    for (const watcher of this.listeners) {
      watcher();
    }
  }

  /**
   * The step's result, for the claim's owner, if it has not expired and was
   * saved by the same request (fingerprint), or by the previous version of
   * the store (no fingerprint, see `parseStep`).
   */
  async readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ readonly result: unknown } | undefined> {
    const id = RedisKeys.id(lease.scope, lease.key);
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
   */
  async saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    // Whether or not it is saved: its completion clears the steps then.
    this.stepless.delete(lease);
    const id = RedisKeys.id(lease.scope, lease.key);
    const expiresAt = Date.now() + ms(ttlMs);
    const field = `s:${step}`;
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
        [this.keys.record(id), this.keys.steps(id)],
        [
          lease.owner,
          field,
          stepValue(expiresAt, lease.fingerprint, result),
          RedisKeys.identity(lease.scope, lease.key),
          ms(ttlMs) + this.options.abandonedStepsGraceMs,
          ms(ttlMs),
          fingerprintLine(lease.fingerprint),
        ],
      ),
    ]);
    return saved === 1;
  }

  /**
   * Redis deletes expired records by itself (PX): this hands over the steps
   * of keys whose requests never completed, in bounded batches through the
   * index of steps by expiry, each key reported before its steps are
   * deleted.
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
    const ids = [
      ...new Set(
        due
          .filter((_, i) => i % 2 === 0)
          .map((member) => member.slice(0, RECORD_ID_LENGTH)),
      ),
    ];
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
    // Reported before anything is deleted: a report that throws leaves
    // every step to the next collection.
    for (const report of reports) {
      abandoned(report);
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
    await runScript(this.client, UNINDEX, [this.keys.stepsIndex], due);
    return {
      removed: dropped.reduce((sum, n) => sum + n, 0),
      more: due.length / 2 >= batchSize,
    };
  }

  /** Closes the subscription, and the client when the store built it. */
  async close(): Promise<void> {
    this.closed = true;
    this.subscribed = false;
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    await Promise.all([
      subscriber?.quit().catch(() => subscriber.disconnect()),
      this.ownsClient
        ? this.client.quit().catch(() => this.client.disconnect())
        : undefined,
    ]);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.close();
  }
}
