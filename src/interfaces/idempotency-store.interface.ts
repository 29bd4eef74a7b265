import type { HandlerTransactions } from './handler-transaction.interface.js';

/**
 * A response as stored and replayed: status, the headers kept for replay
 * (lower-cased names) and the exact bytes of the body.
 */
export interface StoredResponse {
  readonly status: number;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * Final state of a record: `completed` (a success), `failed` (an error
 * stored by the error policy), `not_replayable` (a response that could not
 * be stored: a stream, or a body over the size limit).
 */
export type RecordStatus = 'completed' | 'failed' | 'not_replayable';

/** A finished record, as read back. */
export interface StoredRecord {
  readonly status: RecordStatus;
  readonly fingerprint: string;
  readonly response: StoredResponse;
}

/**
 * A claim held by an attempt: what the module hands back to every later
 * call of the store for that claim (`complete`, `release`, `readStep`,
 * `saveStep`, `notify`). It is the handle the store returned with the
 * claim (`ClaimOutcome.lease`), or, when it returned none, the
 * {@link ClaimRequest} the claim was granted for.
 */
export interface Lease {
  readonly scope: string;
  readonly key: string;
  /** Random token of the attempt: every write of the claim is fenced by it. */
  readonly owner: string;
}

/**
 * A lease with the fingerprint of its request: what a recovery point is
 * saved for and read back by. A key with a committed step stays bound to
 * that fingerprint until the step expires (the module keeps it `ttl` after
 * the deadline of the attempt that saved it) or the key completes.
 */
export interface StepLease extends Lease {
  /** Fingerprint of the request that holds the claim. */
  readonly fingerprint: string;
}

/** What identifies a request, and who attempts it. */
export interface ClaimRequest extends StepLease {
  readonly method: string;
  readonly path: string;
  /** How long the claim stays owned without renewal (ms). */
  readonly leaseMs: number;
  /** How long the finished record is kept (ms). */
  readonly ttlMs: number;
  /** Whether a duplicate will wait for the claim's completion (wait mode). */
  readonly wait: boolean;
}

/**
 * Outcome of a claim:
 * - `claimed`: this attempt owns the key; run the handler.
 * - `finished`: a finished record exists; replay it (or refuse it).
 * - `in_progress`: another attempt owns the key, with `fingerprint`; its
 *   lease runs out in `leaseMs` unless renewed. Also the outcome for a key
 *   bound to another request by a committed step (see {@link StepLease}),
 *   whether the attempt that saved it still holds the claim, released it
 *   or lost its lease: `fingerprint` is that request's.
 */
export type ClaimOutcome =
  | {
      readonly state: 'claimed';
      /**
       * The store's handle of the claim, handed back to its later calls
       * for it: a store that needs to remember how it granted the claim
       * (the Redis store: whether the key had steps) returns an object of
       * its own here, extending the request's fields. Default: the
       * {@link ClaimRequest} itself.
       */
      readonly lease?: StepLease;
      /**
       * The key's generation: a token that the store keeps with the key and
       * the module derives the keys of downstream calls from (see
       * `IdempotencyContext.deriveKey`). A claim that finds the key free
       * (never claimed, its record expired, or released unbound) starts a
       * generation never used before by that key; every other claim of it
       * returns the same one: a takeover of an ended lease or of a dead
       * instance's claim, and a claim of a key bound to its request (see
       * {@link IdempotencyStore.bind}) after its release, until the key
       * expires (`ttlMs` after its last claim at the earliest).
       */
      readonly generation: string;
    }
  | { readonly state: 'finished'; readonly record: StoredRecord }
  | {
      readonly state: 'in_progress';
      readonly fingerprint: string | undefined;
      readonly leaseMs: number;
    };

/** What a completion writes into the claimed record. */
export interface Completion {
  readonly status: RecordStatus;
  /** The response; only its status for a record that is not replayable. */
  readonly response: StoredResponse | { readonly status: number };
  readonly ttlMs: number;
}

/** The outcome of a fenced write. */
export interface FencedWrite {
  /** False when the lease was lost: another attempt owns the key now. */
  readonly fenced: boolean;
  /** Whether a duplicate waits for the key (its waiters are to be woken). */
  readonly waiting: boolean;
}

/** The key whose failed attempts {@link IdempotencyStore.countFailure} counts. */
export interface FailureKey {
  readonly scope: string;
  readonly key: string;
}

/** A lease to renew, for `durationMs` from now. */
export interface Renewal extends Lease {
  readonly durationMs: number;
}

/** Recovery points of a key whose request never completed, as collected. */
export interface AbandonedKey {
  readonly scope: string;
  readonly key: string;
  readonly steps: ReadonlyArray<{
    readonly step: string;
    readonly result: unknown;
    /**
     * Why the result could not be opened (a sealed result whose key is not
     * in the ring, or altered): `result` is then `undefined`.
     * @default undefined: the result is there
     */
    readonly unreadable?: string;
  }>;
}

/** A record's state, as an operator sees it: in progress, or how it finished. */
export type RecordState = RecordStatus | 'in_progress';

/** A record as {@link IdempotencyStore.inspectRecord} reads it. */
export interface RecordInspection {
  readonly scope: string;
  readonly key: string;
  readonly status: RecordState;
  readonly fingerprint: string;
  /** The request's method and route, where the store keeps them. */
  readonly method?: string;
  readonly path?: string;
  /** The attempt that holds the claim; `undefined` once finished or released. */
  readonly owner?: string;
  /** When the owner's lease runs out, unless renewed. */
  readonly leaseExpiresAt?: Date;
  /**
   * The key's generation (see `ClaimOutcome`): the fence a takeover or a
   * reset keeps, and the downstream keys derive from.
   */
  readonly generation?: string;
  /**
   * Whether the key is bound to its request: an unfinished record (held or
   * released) of an attempt that began a step. A finished record is
   * replayed, and bound to no request that must run it: `false`.
   */
  readonly bound: boolean;
  readonly createdAt?: Date;
  readonly completedAt?: Date;
  readonly expiresAt: Date;
  /** The stored response; its body only when asked for. */
  readonly response?: {
    readonly status: number;
    readonly headers: Record<string, string | string[]>;
    readonly body?: Buffer;
  };
  /** The key's recovery points (their results are not read). */
  readonly steps: ReadonlyArray<{
    readonly step: string;
    readonly createdAt?: Date;
    readonly expiresAt: Date;
  }>;
}

/** What {@link IdempotencyStore.listRecords} looks for. */
export interface RecordQuery {
  /** The states listed. */
  readonly statuses: readonly RecordState[];
  readonly scope?: string;
  /** Only records created before this instant. */
  readonly olderThan?: Date;
  readonly limit: number;
  /** Where the previous page ended (the store's own opaque text). */
  readonly cursor?: string;
}

/** A record in a list: what it is, who holds it, since when. */
export type RecordSummary = Omit<RecordInspection, 'response' | 'steps'>;

/** A page of records, and where the next one starts (none: the last page). */
export interface RecordPage {
  readonly records: readonly RecordSummary[];
  readonly cursor?: string;
}

/** What one batch of {@link IdempotencyStore.forgetRecords} deleted. */
export interface ForgottenBatch {
  readonly records: number;
  readonly steps: number;
  /** Whether rows of the scope (or key) may be left. */
  readonly more: boolean;
}

/**
 * The outcome of {@link IdempotencyStore.resetRecord}: `reset`, the record
 * ended (`fenced`: a claim was taken from its owner, whose later writes are
 * refused); `absent`, nothing to reset; `held`, an owner's lease is live
 * for `leaseMs` more and the reset was not forced.
 */
export type ResetOutcome =
  | { readonly state: 'reset'; readonly fenced: boolean }
  | { readonly state: 'absent' }
  | {
      readonly state: 'held';
      readonly owner?: string;
      readonly leaseMs: number;
    };

/**
 * The claim protocol that the module's request sequence runs on:
 * claim, renew, complete, release, steps and collection. The PostgreSQL
 * store is built in; its completion runs inside the handler's own
 * transaction.
 *
 * The interface doubles as its injection token.
 */
export interface IdempotencyStore<Transaction = unknown> {
  /**
   * Whether `complete()` writes in the handler's own database transaction
   * (the record commits with the handler's writes), or right after the
   * handler (a store outside the application's database).
   */
  readonly completesInTransaction: boolean;
  /**
   * The handlers' transactions that `complete()` writes in, for a store that
   * completes in the handler's transaction: the PostgreSQL store's, from its
   * data library's adapter. The module runs every handler in one of them.
   * @default none: a handler runs in no transaction of the module's
   */
  readonly transactions?: HandlerTransactions<unknown>;
  /**
   * Whether `saveStep` (and `replaceStepResult`) keeps a result given as a
   * `Buffer` as its bytes, and reads it back as a `Buffer` (`readStep`,
   * `readStepResults`, `collect`): the `encryption` option then hands such
   * a store step results sealed in bytes, as it seals responses, instead of
   * as text (base64, a third larger). Results of other shapes are JSON
   * values, kept as before.
   * @default false: step results are JSON values only
   */
  readonly binaryStepResults?: boolean;
  /** Claims a key, or reports the record that holds it. One statement. */
  claim(request: ClaimRequest): Promise<ClaimOutcome>;
  /** Renews leases; returns the owners that still hold their claim. */
  renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>>;
  /**
   * Writes the response into the claimed record, fenced by the owner: in
   * `transaction` when the store completes in the handler's transaction.
   */
  complete(
    lease: Lease,
    completion: Completion,
    transaction: Transaction | undefined,
  ): Promise<FencedWrite>;
  /**
   * Gives the claim up: the next attempt runs at once. A key bound to its
   * request (by {@link bind}, a committed step, or `bind` here) stays so,
   * with its generation: only an attempt of the same request (fingerprint)
   * may claim it again, and it resumes after its last step; any other key
   * the store may forget at once.
   * @param bind whether the attempt sent derived keys downstream: the key is
   * then bound to its request as by {@link bind}.
   */
  release(lease: Lease, bind?: boolean): Promise<FencedWrite>;
  /**
   * Binds the key to the lease's request (its fingerprint), fenced by the
   * owner, and durably: the request is about to have an effect outside the
   * database (a step begins), under keys derived from the key's
   * generation. Until the key completes or expires, whether the claim is
   * then released, taken over or lost with its instance, only the same
   * request claims the key again (with the same generation, so that it
   * derives the same keys and the downstream service deduplicates the
   * effect); another one is refused (`in_progress`, with this request's
   * fingerprint).
   * @param holdMs how long from now the key stays bound at least: until
   * `ttl` after the attempt's deadline, so that the binding outlives the
   * attempt however short the `ttl` (a store that ignores it keeps the key
   * bound as its claim's expiry says).
   * @returns false when the lease was lost: another attempt owns the key.
   */
  bind(lease: StepLease, holdMs?: number): Promise<boolean>;
  /** Wakes the waiters of keys on other instances, after their completion. */
  notify(leases: readonly Lease[]): Promise<void>;
  /**
   * Calls `listener` when another instance completes or releases a key that
   * has waiters, and without arguments when notifications may have been
   * missed (any key may have changed). Waiters also look again when the
   * owner's lease would run out; while `watching` is false they look every
   * 250 ms.
   */
  watch(listener: (scope?: string, key?: string) => void): void;
  /** Whether notifications of other instances reach this one now. */
  readonly watching: boolean;
  /**
   * The stored result of a completed step of the same request
   * (fingerprint), if any; never another request's.
   */
  readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ readonly result: unknown } | undefined>;
  /**
   * Commits a step's result at once, fenced by the owner, and binds the key
   * to the lease's fingerprint (see {@link StepLease}). A result larger than
   * the store can ever keep is refused before anything is written, with
   * `IdempotencyStepTooLargeError` (the module then saves a small mark in
   * its place, and the step never runs again); any other error is taken as
   * the store out of reach (503).
   * @param ttlMs how long from now the step, and the key's binding, are
   * kept at least: the module passes `ttl` after the attempt's deadline, so
   * that no step of an attempt expires before a retry of it can come.
   */
  saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean>;
  /**
   * Counts a failed attempt of a key (its handler threw), in a write of its
   * own that the handler's rollback does not undo, and returns the key's
   * failed attempts so far, this one included. The count outlives the
   * claim's release and the record, and lasts `ttlMs` after the last
   * failure; it never binds the key nor keeps it claimed. The module counts
   * only for routes with `maxAttempts` (messages), to hand a poison message
   * to the dead-letter path.
   * @default absent: a route with `maxAttempts` fails, as a configuration
   * error, instead of counting
   */
  countFailure?(key: FailureKey, ttlMs: number): Promise<number>;
  /**
   * Forgets the failed attempts {@link countFailure} counted of a key. The
   * module calls it once the route's `deadLetter` took the message, so that
   * the message, published again once the cause of its failures is fixed,
   * has `maxAttempts` attempts anew.
   * @default absent: the count lasts `ttlMs` after the last failure, and a
   * message published again within it is handed over at its first failure
   */
  forgetFailures?(key: FailureKey): Promise<void>;
  /**
   * Deletes at most `batchSize` expired records, or else expired steps, each
   * group of steps of one key handed to `abandoned` before its deletion
   * commits.
   * @returns how many rows it deleted, and whether more may be left.
   */
  collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ readonly removed: number; readonly more: boolean }>;
  /**
   * Reads a record and its steps for an operator, the response's body only
   * when `withBody`; `undefined` when the key has no record. The module
   * also reads a record back with it (its `method` and `path`) when the
   * record's fingerprint may be one that 0.6 wrote for a `fingerprint`
   * function's value, to replay it only to a request of its method and path.
   * @default absent: `IdempotencyAdmin.inspect` refuses the store, and a
   * record that 0.6 wrote for a `fingerprint` function gets 422
   */
  inspectRecord?(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined>;
  /**
   * Lists records in the query's states, in a stable order, a page at a time.
   * @default absent: `IdempotencyAdmin.list` refuses the store
   */
  listRecords?(query: RecordQuery): Promise<RecordPage>;
  /**
   * Ends a record so that the next request of its key runs: a finished one
   * is deleted with its steps; a claim is taken from its owner as a
   * takeover would (the owner's completion, renewals and steps are fenced
   * out; a key bound to its request stays so, with its generation), unless
   * its lease is live and `force` is false.
   * @default absent: `IdempotencyAdmin.reset` refuses the store
   */
  resetRecord?(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome>;
  /**
   * Deletes at most `batchSize` records and steps of `scope` (of its `key`
   * alone when given), each batch a write of its own that holds nothing
   * after it: a claim among them is fenced out as by a reset.
   * @returns how many records and steps it deleted, and whether more may
   * be left.
   * @default absent: `IdempotencyAdmin.forget` refuses the store
   */
  forgetRecords?(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch>;
  /**
   * Replaces the stored headers and body of a finished record (completed or
   * failed), only if its stored body is still `expected` byte for byte and,
   * when `generation` is given, the record is still of that generation
   * (`RecordInspection.generation`): a compare-and-set, so that a record
   * completed, reset or taken again since it was read is left alone, even
   * with the same body (a plaintext one, whose bytes a new completion may
   * repeat). Its status, times and expiry are kept. For key rotation
   * (`IdempotencyAdmin.reencrypt`).
   * @returns whether it was replaced.
   * @default absent: `IdempotencyAdmin.reencrypt` refuses the store
   */
  replaceResponse?(
    scope: string,
    key: string,
    expected: Buffer,
    response: StoredResponse,
    generation?: string,
  ): Promise<boolean>;
  /**
   * The stored results of the steps of `key` in `scope`, whatever their
   * generation, as `readStep` would return them. For key rotation
   * (`IdempotencyAdmin.reencrypt`, with {@link replaceStepResult}).
   * @default absent: `reencrypt` reseals no step
   */
  readStepResults?(
    scope: string,
    key: string,
  ): Promise<
    ReadonlyArray<{ readonly step: string; readonly result: unknown }>
  >;
  /**
   * Replaces the stored result of a step, only if it is still `expected`
   * (as {@link readStepResults} returned it): a compare-and-set. Its
   * fingerprint, generation and expiry are kept.
   * @returns whether it was replaced.
   * @default absent: `reencrypt` reseals no step
   */
  replaceStepResult?(
    scope: string,
    key: string,
    step: string,
    expected: unknown,
    result: unknown,
  ): Promise<boolean>;
}

/** Injection token of the {@link IdempotencyStore}. */
export const IdempotencyStore = Symbol('IdempotencyStore');
