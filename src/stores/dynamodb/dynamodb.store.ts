import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type {
  AbandonedKey,
  ClaimOutcome,
  ClaimRequest,
  FailureKey,
  Completion,
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
import {
  DynamoDbForget,
  inspectDynamoDbRecord,
  listDynamoDbRecords,
  resetDynamoDbRecord,
} from './dynamodb-admin.js';
import { claimKey, renewLeases } from './dynamodb-claim.js';
import { DynamoDbCollection } from './dynamodb-collection.js';
import { countFailure, forgetFailures } from './dynamodb-failures.js';
import { completeClaim, releaseClaim } from './dynamodb-completion.js';
import { DynamoDbRecords } from './dynamodb-records.js';
import { bindClaim, readStepResult, saveStepResult } from './dynamodb-steps.js';
import {
  DEFAULT_DYNAMODB_TABLE_NAME,
  type DynamoDbIdempotencyStoreOptions,
  resolveDynamoDbStoreOptions,
} from './dynamodb-store.options.js';
import { createDynamoDbTable } from './dynamodb-table.js';

/**
 * The claim protocol on DynamoDB (AWS SDK v3), for handlers whose side
 * effects are not rows of the application's PostgreSQL, and for applications
 * without PostgreSQL. The record is written right after the handler, not in
 * its transaction (`completesInTransaction` is false).
 *
 * One item per scope and key (partition key `pk`: a digest of both); its
 * recovery points live in the item too (a map `steps`), so that every
 * fenced write is one conditional UpdateItem on one item: a claim (with
 * `ReturnValuesOnConditionCheckFailure` so that a refused claim reads the
 * record that holds the key in the same round trip), a renewal, a binding,
 * a step, and a completion that clears the steps in the same write.
 * A key is bound to the request that claimed it (the item's `fingerprint`)
 * by `bind()` before a step runs, and by a release told to bind it (both
 * mark the item `bound`, which holds while the key lives: every claim
 * pushes its `expires_at` on), and by a committed step until it expires
 * (`bound_until`, written by the step's write); the completion ends the
 * binding. The claim's condition refuses another request's claim of a
 * bound key, released or past its lease, in the same one request, and a
 * step is read back only by its own request (each step carries its
 * fingerprint).
 * Expiry is decided from the item's own timestamps (ms), with the
 * application's clock (keep the instances' clocks in sync: a skew lengthens
 * or shortens leases by as much): DynamoDB's TTL (attribute `ttl`, epoch
 * seconds, set on finished records) only deletes them, up to days late. A
 * claim in progress has no TTL (a renewal may outlive any TTL set at the
 * claim, and TTL would delete the steps unseen): the collector
 * (`IdempotencyCollector`) hands its steps over, then deletes it.
 * The key's generation (`generation`, a random UUID) lives in the item while
 * it is a claim: kept by a takeover and by a release of a bound key (the
 * item stays, ownerless) until the claim's `expires_at` and its steps'
 * `bound_until` have both passed; the completion removes it.
 *
 * DynamoDB has no notifications: `watching` is false and `notify()` does
 * nothing; duplicates that wait poll for the record.
 *
 * An item holds at most 400 KB: a response that does not fit is recorded as
 * not replayable (its status kept: a duplicate is refused, the handler never
 * runs twice), whatever the module's `maxResponseSize` (1 MiB by default);
 * a step's result that does not fit is saved as run without a result, and
 * the request (and every retry of its key) answered with a 500
 * (`IdempotencyStepResultTooLargeException`), the step never run again. A
 * step's result takes at most about 397 KiB as its JSON, less the other
 * steps of its key; with `encryption`, 35 bytes or so less (sealed in
 * bytes: a binary attribute).
 *
 * @example
 * const client = new DynamoDBClient({ region: 'eu-west-1' });
 * await DynamoDbIdempotencyStore.createTable(client);
 * const store = new DynamoDbIdempotencyStore(client, { tableName: 'idempotency_records' });
 */
export class DynamoDbIdempotencyStore implements IdempotencyStore {
  /** False: the record is written after the handler, outside its transaction. */
  readonly completesInTransaction = false;
  /**
   * True: a step's result sealed by the `encryption` option is kept as a
   * binary attribute, a third smaller than its base64 text.
   */
  readonly binaryStepResults = true;
  /** False: DynamoDB has no notifications; waiters poll. */
  readonly watching = false;
  private readonly records: DynamoDbRecords;
  private readonly collection: DynamoDbCollection;
  private readonly forgetting: DynamoDbForget;

  /**
   * @param client the application's DynamoDB client (its region, endpoint
   * and credentials); the store never closes it.
   */
  constructor(
    client: DynamoDBClient,
    options: DynamoDbIdempotencyStoreOptions = {},
  ) {
    const { tableName, scanPageSize } = resolveDynamoDbStoreOptions(options);
    this.records = new DynamoDbRecords(client, tableName);
    this.collection = new DynamoDbCollection(this.records, scanPageSize);
    this.forgetting = new DynamoDbForget(this.records);
  }

  /**
   * Creates the store's table (on-demand capacity, partition key `pk`), waits
   * until it is active, and enables DynamoDB's TTL on attribute `ttl`. A table
   * that exists already is kept.
   * @param options.tableName default `'idempotency_records'`
   * @param options.timeToLive whether to enable TTL (default true; a local
   * emulator without UpdateTimeToLive needs false)
   */
  static createTable(
    client: DynamoDBClient,
    options: { tableName?: string; timeToLive?: boolean } = {},
  ): Promise<void> {
    return createDynamoDbTable(client, {
      tableName: options.tableName ?? DEFAULT_DYNAMODB_TABLE_NAME,
      timeToLive: options.timeToLive ?? true,
    });
  }

  /** Keeps no listener: DynamoDB tells nothing of other instances' writes. */
  watch(): void {
    // No notifications to listen to: waiters poll.
  }

  /** Does nothing: duplicates that wait poll for the record. */
  async notify(): Promise<void> {
    // No notifications to send.
  }

  /**
   * One conditional UpdateItem: claims a free key, a finished record past its
   * expiry, or a claim past its lease (keeping its steps), unless a live step
   * binds the key to another request; otherwise the refusal returns the item
   * that holds the key (in progress, with the fingerprint of the request it
   * is bound to). A duplicate that waits marks the claim `waiting` with a
   * second, conditional write. The same write keeps the key's generation
   * and its binding (a takeover, a claim after the release of a bound key)
   * or starts a generation, and returns them (the binding in the claim's
   * handle); a claim past its expiry whose item still carries the
   * generation it had takes a second write to start a new one.
   */
  claim(request: ClaimRequest): Promise<ClaimOutcome> {
    return claimKey(this.records, request);
  }

  /** One conditional UpdateItem per lease, sent together. */
  renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    return renewLeases(this.records, leases);
  }

  /**
   * Writes the response, clears the steps (and with them the key's binding
   * to its request) and sets the TTL attribute in one
   * conditional UpdateItem fenced by the owner, right after the handler (no
   * transaction to join). A response too large for the item is recorded as
   * not replayable.
   */
  complete(
    lease: Lease,
    completion: Completion,
    _transaction?: unknown,
  ): Promise<FencedWrite> {
    return completeClaim(this.records, lease, completion);
  }

  /**
   * Deletes the claim's item when its key is not bound to its request and
   * `bind` is false; otherwise keeps it for the next attempt, in progress
   * with no owner and its lease run out (marked `bound` with `bind`): its
   * steps, its fingerprint, its binding and its generation stay, so that
   * only the same request claims it again, with the same generation, until
   * the key expires. One conditional write: a DeleteItem, or an UpdateItem
   * where the claim's handle knows the key bound or `bind` is true; a
   * deletion refused for a binding the handle did not know of is followed
   * by the UpdateItem.
   */
  release(lease: Lease, bind?: boolean): Promise<FencedWrite> {
    return releaseClaim(this.records, lease, bind);
  }

  /**
   * Marks the claim's item `bound` in one conditional UpdateItem fenced by
   * the owner (and the claim's fingerprint): until the key completes or
   * expires, only the same request claims it again, with the same
   * generation.
   */
  bind(lease: StepLease, holdMs?: number): Promise<boolean> {
    return bindClaim(this.records, lease, holdMs);
  }

  /**
   * A step's result of the lease's request, read strongly consistent; none
   * past its expiry, and never another request's (fingerprint).
   */
  readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ result: unknown } | undefined> {
    return readStepResult(this.records, lease, step);
  }

  /**
   * Writes the result, with the lease's fingerprint, into the claim's item
   * (`steps`), fenced by the owner (and by the claim's fingerprint), and
   * binds the key to the request until the step expires; a result in
   * bytes (sealed) as a binary attribute.
   * @throws IdempotencyStepTooLargeError when the item would exceed
   * DynamoDB's 400 KB.
   */
  saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    return saveStepResult(this.records, lease, step, result, ttlMs);
  }

  /**
   * Goes on with a Scan of the table (one page per call, `scanPageSize`
   * items): deletes the records past their expiry, and hands the expired
   * steps of each key over to `abandoned` before deleting them (a failed
   * hand-over deletes nothing of its key). Every deletion is conditional on
   * the item being as read. DynamoDB's TTL deletes finished records too.
   * @returns `more` while the Scan has not reached the end of the table.
   */
  /**
   * Counts in an item of its own beside the record (see
   * dynamodb-failures.ts), which a release leaves alone.
   */
  countFailure(key: FailureKey, ttlMs: number): Promise<number> {
    return countFailure(this.records, key, ttlMs);
  }

  /** Deletes the item that counts the key's failed attempts. */
  forgetFailures(key: FailureKey): Promise<void> {
    return forgetFailures(this.records, key);
  }

  collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ removed: number; more: boolean }> {
    return this.collection.collect(batchSize, abandoned);
  }

  /** Reads the record's item, strongly consistent, in one GetItem. */
  inspectRecord(
    scope: string,
    key: string,
    withBody: boolean,
  ): Promise<RecordInspection | undefined> {
    return inspectDynamoDbRecord(this.records, scope, key, withBody);
  }

  /**
   * Lists records by a consistent Scan of the table, filtered by the query,
   * in the table's order (the key's digest): the cursor is where the page
   * ended. A record's creation time is its last claim's, by the claiming
   * instance's clock; records written before it was kept show none.
   */
  listRecords(query: RecordQuery): Promise<RecordPage> {
    return listDynamoDbRecords(this.records, query);
  }

  /**
   * Ends a record by one write conditioned on the state it read (see
   * dynamodb-admin.ts): a claim bound to its request is released as a
   * release leaves it, any other item deleted.
   */
  resetRecord(
    scope: string,
    key: string,
    force: boolean,
  ): Promise<ResetOutcome> {
    return resetDynamoDbRecord(this.records, scope, key, force);
  }

  /**
   * Deletes a key's item and its count of failures, or the items of a
   * scope found by a consistent Scan, deleted by BatchWriteItem: DynamoDB
   * holds nothing between two.
   */
  forgetRecords(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    return this.forgetting.forget(scope, key, batchSize);
  }
}
