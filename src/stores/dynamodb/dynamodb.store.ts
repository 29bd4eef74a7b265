import type { AttributeValue, DynamoDBClient } from '@aws-sdk/client-dynamodb';
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
import {
  DEFAULT_DYNAMODB_TABLE_NAME,
  type DynamoDbIdempotencyStoreOptions,
  type ResolvedDynamoDbStoreOptions,
  resolveDynamoDbStoreOptions,
} from './dynamodb-store.options.js';
import {
  isConditionFailure,
  isItemTooLarge,
  loadDynamoDbSdk,
} from './dynamodb-sdk.js';
import {
  CLAIMABLE_CONDITION,
  DYNAMODB_ITEM_LIMIT_BYTES,
  UNBOUND_CONDITION,
  boundElsewhere,
  claimable,
  collectable,
  inProgress,
  type Item,
  num,
  numberOf,
  partitionKey,
  recordOf,
  sizeOf,
  stepReadable,
  stepsOf,
  str,
  stringOf,
} from './dynamodb-item.js';
import { createDynamoDbTable } from './dynamodb-table.js';
import { notReplayable } from '../not-replayable.js';

/** Room left in an item for the attributes a completion does not write. */
const RECORD_OVERHEAD_BYTES = 2048;
/** A claim that keeps losing races with releases gives up after this. */
const CLAIM_ATTEMPTS = 5;
const OWNED = '#owner = :owner AND #status = :inProgress';
const NAMES = {
  '#status': 'status',
  '#owner': 'owner',
};
const IN_PROGRESS = str('in_progress');

/**
 * The claim protocol on DynamoDB (AWS SDK v3), for handlers whose side
 * effects are not rows of the application's PostgreSQL, and for applications
 * without PostgreSQL. The record is written right after the handler, not in
 * its transaction (`completesInTransaction` is false).
 *
 * One item per scope and key (partition key: a digest of both, see
 * {@link partitionKey}); its recovery points live in the item too (a map
 * `steps`), so that every fenced write is one conditional UpdateItem on one
 * item: a claim (with `ReturnValuesOnConditionCheckFailure` so that a refused
 * claim reads the record that holds the key in the same round trip), a
 * renewal, a step, and a completion that clears the steps in the same write.
 * A step binds the key to the request that saved it (the item's
 * `fingerprint`) until it expires (`bound_until`, written by the step's
 * write) or the key completes: the claim's condition refuses another
 * request's claim of a bound key, released or past its lease, in the same
 * one request, and a step is read back only by its own request (each step
 * carries its fingerprint).
 * Expiry is decided from the item's own timestamps (ms), with the
 * application's clock (keep the instances' clocks in sync: a skew lengthens
 * or shortens leases by as much): DynamoDB's TTL (attribute `ttl`, epoch
 * seconds, set on finished records) only deletes them, up to days late. A
 * claim in progress has no TTL (a renewal may outlive any TTL set at the
 * claim, and TTL would delete the steps unseen): the collector
 * (`IdempotencyCollector`) hands its steps over, then deletes it.
 *
 * DynamoDB has no notifications: `watching` is false and `notify()` does
 * nothing; duplicates that wait poll for the record.
 *
 * An item holds at most 400 KB: a response that does not fit is recorded as
 * not replayable (its status kept: a duplicate is refused, the handler never
 * runs twice), whatever the module's `maxResponseSize` (1 MiB by default);
 * a step's result that does not fit is refused with an error.
 *
 * @example
 * const client = new DynamoDBClient({ region: 'eu-west-1' });
 * await DynamoDbIdempotencyStore.createTable(client);
 * const store = new DynamoDbIdempotencyStore(client, { tableName: 'idempotency_records' });
 */
export class DynamoDbIdempotencyStore implements IdempotencyStore {
  /** False: the record is written after the handler, outside its transaction. */
  readonly completesInTransaction = false;
  /** False: DynamoDB has no notifications; waiters poll. */
  readonly watching = false;
  private readonly options: ResolvedDynamoDbStoreOptions;
  /** Where the collection's Scan resumes (undefined: at the start). */
  private cursor: Item | undefined;

  /**
   * @param client the application's DynamoDB client (its region, endpoint
   * and credentials); the store never closes it.
   */
  constructor(
    private readonly client: DynamoDBClient,
    options: DynamoDbIdempotencyStoreOptions = {},
  ) {
    this.options = resolveDynamoDbStoreOptions(options);
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
   * second, conditional write.
   */
  async claim(request: ClaimRequest): Promise<ClaimOutcome> {
    const sdk = await loadDynamoDbSdk();
    for (let attempt = 1; ; attempt += 1) {
      const now = Date.now();
      let existing: Item | undefined;
      try {
        await this.client.send(
          new sdk.UpdateItemCommand({
            TableName: this.options.tableName,
            Key: this.keyOf(request),
            UpdateExpression:
              'SET #scope = :scope, #key = :key, fingerprint = :fingerprint,' +
              ' #method = :method, #path = :path, #status = :inProgress,' +
              ' #owner = :owner, lease_expires_at = :lease,' +
              ' expires_at = :expires, waiting = :false,' +
              ' steps = if_not_exists(steps, :noSteps)' +
              ' REMOVE response_status, response_headers, response_body, #ttl',
            ConditionExpression: `${CLAIMABLE_CONDITION} AND ${UNBOUND_CONDITION}`,
            ExpressionAttributeNames: {
              ...NAMES,
              '#scope': 'scope',
              '#key': 'key',
              '#method': 'method',
              '#path': 'path',
              '#ttl': 'ttl',
            },
            ExpressionAttributeValues: {
              ':scope': str(request.scope),
              ':key': str(request.key),
              ':fingerprint': str(request.fingerprint),
              ':method': str(request.method),
              ':path': str(request.path),
              ':inProgress': IN_PROGRESS,
              ':owner': str(request.owner),
              ':lease': num(now + request.leaseMs),
              ':expires': num(now + Math.max(request.ttlMs, request.leaseMs)),
              ':false': { BOOL: false },
              ':noSteps': { M: {} },
              ':now': num(now),
            },
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
          }),
        );
        return { state: 'claimed' };
      } catch (error) {
        if (!isConditionFailure(error)) {
          throw error;
        }
        existing = error.Item as Item | undefined;
      }
      // A server that does not return the item with the refusal: read it.
      existing ??= await this.read(request);
      if (
        existing &&
        inProgress(existing) &&
        stringOf(existing.owner) === request.owner
      ) {
        // This attempt's own claim: the SDK sent the request again after a
        // connection reset lost the reply of the write that took the key.
        // The owner token is one attempt's, never shared.
        return { state: 'claimed' };
      }
      const later = Date.now();
      if (
        (!existing ||
          (claimable(existing, later) &&
            !boundElsewhere(existing, request.fingerprint, later))) &&
        attempt < CLAIM_ATTEMPTS
      ) {
        // Released or expired between the two requests: claim again.
        continue;
      }
      return this.refusal(request, existing);
    }
  }

  /** The outcome of a refused claim, from the item that holds the key. */
  private async refusal(
    request: ClaimRequest,
    item: Item | undefined,
  ): Promise<ClaimOutcome> {
    if (item && !inProgress(item)) {
      return { state: 'finished', record: recordOf(item) };
    }
    const fingerprint = item ? stringOf(item.fingerprint) : undefined;
    const owner = item ? stringOf(item.owner) : undefined;
    if (
      request.wait &&
      owner !== undefined &&
      fingerprint === request.fingerprint &&
      !(item?.waiting && 'BOOL' in item.waiting && item.waiting.BOOL)
    ) {
      // The owner is to tell its completion to the duplicate that waits.
      const sdk = await loadDynamoDbSdk();
      await this.client
        .send(
          new sdk.UpdateItemCommand({
            TableName: this.options.tableName,
            Key: this.keyOf(request),
            UpdateExpression: 'SET waiting = :true',
            ConditionExpression: OWNED,
            ExpressionAttributeNames: NAMES,
            ExpressionAttributeValues: {
              ':true': { BOOL: true },
              ':owner': str(owner),
              ':inProgress': IN_PROGRESS,
            },
          }),
        )
        .catch((error: unknown) => {
          // Finished or taken over meanwhile: nobody to tell.
          if (!isConditionFailure(error)) {
            throw error;
          }
        });
    }
    const leaseExpiresAt = item ? numberOf(item.lease_expires_at) : undefined;
    return {
      state: 'in_progress',
      fingerprint,
      leaseMs: Math.max(0, (leaseExpiresAt ?? 0) - Date.now()),
    };
  }

  /** One conditional UpdateItem per lease, sent together. */
  async renew(leases: readonly Renewal[]): Promise<ReadonlySet<string>> {
    const sdk = await loadDynamoDbSdk();
    const held = await Promise.all(
      leases.map(async (lease) => {
        const written = await this.fenced(
          new sdk.UpdateItemCommand({
            TableName: this.options.tableName,
            Key: this.keyOf(lease),
            UpdateExpression: 'SET lease_expires_at = :lease',
            ConditionExpression: OWNED,
            ExpressionAttributeNames: NAMES,
            ExpressionAttributeValues: {
              ':lease': num(Date.now() + lease.durationMs),
              ':owner': str(lease.owner),
              ':inProgress': IN_PROGRESS,
            },
          }),
        );
        return written ? lease.owner : undefined;
      }),
    );
    return new Set(held.filter((owner) => owner !== undefined));
  }

  /**
   * Writes the response, clears the steps (and with them the key's binding
   * to its request) and sets the TTL attribute in one
   * conditional UpdateItem fenced by the owner, right after the handler (no
   * transaction to join). A response too large for the item is recorded as
   * not replayable.
   */
  async complete(
    lease: Lease,
    completion: Completion,
    _transaction?: unknown,
  ): Promise<FencedWrite> {
    const { response } = completion;
    const stored = 'body' in response ? response : undefined;
    const values: Item = {
      ':status': str(completion.status),
      ':responseStatus': num(response.status),
    };
    if (stored) {
      values[':headers'] = str(JSON.stringify(stored.headers));
      values[':body'] = { B: stored.body };
      const size =
        sizeOf({
          pk: str(partitionKey(lease.scope, lease.key)),
          scope: str(lease.scope),
          key: str(lease.key),
          owner: str(lease.owner),
          response_headers: values[':headers'],
          response_body: values[':body'],
        }) + RECORD_OVERHEAD_BYTES;
      if (size > DYNAMODB_ITEM_LIMIT_BYTES) {
        return this.complete(lease, notReplayable(completion));
      }
    }
    const expiresAt = Date.now() + completion.ttlMs;
    values[':expires'] = num(expiresAt);
    values[':ttl'] = num(Math.ceil(expiresAt / 1000));
    values[':owner'] = str(lease.owner);
    values[':inProgress'] = IN_PROGRESS;
    const sdk = await loadDynamoDbSdk();
    try {
      const outcome = await this.conditional(
        new sdk.UpdateItemCommand({
          TableName: this.options.tableName,
          Key: this.keyOf(lease),
          UpdateExpression:
            'SET #status = :status, response_status = :responseStatus,' +
            (stored
              ? ' response_headers = :headers, response_body = :body,'
              : '') +
            ' expires_at = :expires, #ttl = :ttl' +
            ' REMOVE lease_expires_at, steps, waiting, bound_until',
          ConditionExpression: OWNED,
          ExpressionAttributeNames: { ...NAMES, '#ttl': 'ttl' },
          ExpressionAttributeValues: values,
          ReturnValues: 'ALL_OLD',
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      if (outcome.written) {
        return { fenced: true, waiting: isWaiting(outcome.written) };
      }
      // This very completion, sent again by the SDK after its answer was
      // lost, finds the record it finished: its own, not a takeover. (Its
      // waiters poll: the flag went with the first write.)
      return {
        fenced:
          outcome.current !== undefined &&
          finishedBy(outcome.current, lease.owner),
        waiting: false,
      };
    } catch (error) {
      if (stored && isItemTooLarge(error)) {
        return this.complete(lease, notReplayable(completion));
      }
      throw error;
    }
  }

  /**
   * Deletes the claim's item when it has no steps; otherwise keeps it for the
   * next attempt (a second write), in progress with no owner and its lease
   * run out: its steps, its fingerprint and its binding stay, so that only
   * the same request claims it again while a step lives.
   */
  async release(lease: Lease): Promise<FencedWrite> {
    const sdk = await loadDynamoDbSdk();
    const values = {
      ':owner': str(lease.owner),
      ':inProgress': IN_PROGRESS,
    };
    const deleted = await this.conditional(
      new sdk.DeleteItemCommand({
        TableName: this.options.tableName,
        Key: this.keyOf(lease),
        ConditionExpression: `${OWNED} AND (attribute_not_exists(steps) OR size(steps) = :zero)`,
        ExpressionAttributeNames: NAMES,
        ExpressionAttributeValues: { ...values, ':zero': num(0) },
        ReturnValues: 'ALL_OLD',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    let old = deleted.written;
    if (!old && (!deleted.current || ownedBy(deleted.current, lease.owner))) {
      // Refused for its steps (or the server did not say why): keep it.
      old = await this.fenced(
        new sdk.UpdateItemCommand({
          TableName: this.options.tableName,
          Key: this.keyOf(lease),
          UpdateExpression:
            'SET lease_expires_at = :zero REMOVE #owner, waiting',
          ConditionExpression: OWNED,
          ExpressionAttributeNames: NAMES,
          ExpressionAttributeValues: { ...values, ':zero': num(0) },
          ReturnValues: 'ALL_OLD',
        }),
      );
    }
    return old
      ? { fenced: true, waiting: isWaiting(old) }
      : { fenced: false, waiting: false };
  }

  /**
   * A step's result of the lease's request, read strongly consistent; none
   * past its expiry, and never another request's (fingerprint).
   */
  async readStep(
    lease: StepLease,
    step: string,
  ): Promise<{ result: unknown } | undefined> {
    const sdk = await loadDynamoDbSdk();
    const { Item: item } = await this.client.send(
      new sdk.GetItemCommand({
        TableName: this.options.tableName,
        Key: this.keyOf(lease),
        ProjectionExpression: 'steps.#step',
        ExpressionAttributeNames: { '#step': step },
        ConsistentRead: true,
      }),
    );
    const saved = item ? stepsOf(item).get(step) : undefined;
    return saved && stepReadable(saved, lease.fingerprint, Date.now())
      ? { result: JSON.parse(saved.result) as unknown }
      : undefined;
  }

  /**
   * Writes the result, with the lease's fingerprint, into the claim's item
   * (`steps`), fenced by the owner (and by the claim's fingerprint), and
   * binds the key to the request until the step expires: `bound_until` is
   * raised to the step's expiry in the same write, never lowered (a step
   * saved with a shorter time to live than an earlier one is written by a
   * second write that leaves it).
   * @throws RangeError when the item would exceed DynamoDB's 400 KB.
   */
  async saveStep(
    lease: StepLease,
    step: string,
    result: unknown,
    ttlMs: number,
  ): Promise<boolean> {
    const json = JSON.stringify(result ?? null);
    const tooLarge = () =>
      new RangeError(
        `The result of step "${step}" (${Buffer.byteLength(json)} bytes of JSON) does not fit in DynamoDB's item of 400 KB, which holds the record and all the steps of its key: store a reference to the result instead.`,
      );
    if (
      Buffer.byteLength(json) +
        Buffer.byteLength(step) +
        Buffer.byteLength(lease.fingerprint) +
        RECORD_OVERHEAD_BYTES >
      DYNAMODB_ITEM_LIMIT_BYTES
    ) {
      throw tooLarge();
    }
    const sdk = await loadDynamoDbSdk();
    const expiresAt = num(Date.now() + ttlMs);
    const write = (raise: boolean) =>
      new sdk.UpdateItemCommand({
        TableName: this.options.tableName,
        Key: this.keyOf(lease),
        UpdateExpression: raise
          ? 'SET steps.#step = :step, bound_until = :expires'
          : 'SET steps.#step = :step',
        ConditionExpression:
          `${OWNED} AND fingerprint = :fingerprint AND ` +
          (raise
            ? '(attribute_not_exists(bound_until) OR bound_until <= :expires)'
            : 'bound_until > :expires'),
        ExpressionAttributeNames: { ...NAMES, '#step': step },
        ExpressionAttributeValues: {
          ':step': {
            M: { r: str(json), e: expiresAt, f: str(lease.fingerprint) },
          },
          ':expires': expiresAt,
          ':fingerprint': str(lease.fingerprint),
          ':owner': str(lease.owner),
          ':inProgress': IN_PROGRESS,
        },
        ReturnValues: 'NONE',
        ReturnValuesOnConditionCheckFailure: raise ? 'ALL_OLD' : 'NONE',
      });
    try {
      const raised = await this.conditional(write(true));
      if (raised.written) {
        return true;
      }
      if (
        raised.current &&
        !ownedBy(raised.current, lease.owner, lease.fingerprint)
      ) {
        return false;
      }
      // Bound longer already by an earlier step (or the server did not say
      // why): the step alone, still fenced.
      return (await this.fenced(write(false))) !== undefined;
    } catch (error) {
      throw isItemTooLarge(error) ? tooLarge() : error;
    }
  }

  /**
   * Goes on with a Scan of the table (one page per call, `scanPageSize`
   * items): deletes the records past their expiry, and hands the expired
   * steps of each key over to `abandoned` before deleting them (a failed
   * hand-over deletes nothing of its key). Every deletion is conditional on
   * the item being as read. DynamoDB's TTL deletes finished records too.
   * @returns `more` while the Scan has not reached the end of the table.
   */
  async collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ removed: number; more: boolean }> {
    const sdk = await loadDynamoDbSdk();
    const page = await this.client.send(
      new sdk.ScanCommand({
        TableName: this.options.tableName,
        Limit: this.options.scanPageSize,
        ExclusiveStartKey: this.cursor,
        ConsistentRead: true,
        FilterExpression: 'expires_at < :now OR size(steps) > :zero',
        ExpressionAttributeValues: { ':now': num(Date.now()), ':zero': num(0) },
      }),
    );
    let removed = 0;
    for (const item of page.Items ?? []) {
      if (removed >= batchSize) {
        // The rest of the page is collected by the next call.
        return { removed, more: true };
      }
      removed += await this.collectItem(sdk, item, abandoned);
    }
    this.cursor = page.LastEvaluatedKey;
    return { removed, more: this.cursor !== undefined };
  }

  /** Collects one item; returns how many records and steps it deleted. */
  private async collectItem(
    sdk: Awaited<ReturnType<typeof loadDynamoDbSdk>>,
    item: Item,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<number> {
    const now = Date.now();
    const steps = [...stepsOf(item)];
    const expired = steps.filter(([, step]) => step.expiresAt < now);
    const deleteRecord =
      collectable(item, now) && expired.length === steps.length;
    if (expired.length === 0 && !deleteRecord) {
      return 0;
    }
    if (expired.length > 0 && inProgress(item)) {
      abandoned({
        scope: stringOf(item.scope) ?? '',
        key: stringOf(item.key) ?? '',
        steps: expired.map(([step, { result }]) => ({
          step,
          result: JSON.parse(result) as unknown,
        })),
      });
    }
    // Deleted only as read: no step saved, no claim taken meanwhile.
    const names: Record<string, string> = {};
    const values: Item = { ':steps': num(steps.length) };
    const unchanged = [
      '(attribute_not_exists(steps) OR size(steps) = :steps)',
      ...expired.map(([step, { expiresAt }], index) => {
        names[`#s${index}`] = step;
        values[`:e${index}`] = num(expiresAt);
        return `steps.#s${index}.e = :e${index}`;
      }),
    ];
    const key = { pk: item.pk };
    if (deleteRecord) {
      names['#status'] = 'status';
      values[':now'] = num(now);
      values[':inProgress'] = IN_PROGRESS;
      values[':expires'] = item.expires_at ?? num(0);
      const deleted = await this.fenced(
        new sdk.DeleteItemCommand({
          TableName: this.options.tableName,
          Key: key,
          ConditionExpression: [
            'attribute_exists(pk)',
            CLAIMABLE_CONDITION,
            '(attribute_not_exists(bound_until) OR bound_until <= :now)',
            'expires_at = :expires',
            ...unchanged,
          ].join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
          ReturnValues: 'ALL_OLD',
        }),
      );
      return deleted ? 1 + expired.length : 0;
    }
    const updated = await this.fenced(
      new sdk.UpdateItemCommand({
        TableName: this.options.tableName,
        Key: key,
        UpdateExpression: `REMOVE ${expired.map((_, index) => `steps.#s${index}`).join(', ')}`,
        ConditionExpression: unchanged.join(' AND '),
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
        ReturnValues: 'ALL_OLD',
      }),
    );
    return updated ? expired.length : 0;
  }

  /** The item of a key, read strongly consistent. */
  private async read(lease: Lease): Promise<Item | undefined> {
    const sdk = await loadDynamoDbSdk();
    const { Item: item } = await this.client.send(
      new sdk.GetItemCommand({
        TableName: this.options.tableName,
        Key: this.keyOf(lease),
        ConsistentRead: true,
      }),
    );
    return item;
  }

  /**
   * Sends a conditional write: its returned attributes (an empty item when it
   * returns none), or undefined when its condition failed.
   */
  private async fenced(command: { input: object }): Promise<Item | undefined> {
    return (await this.conditional(command)).written;
  }

  /**
   * Sends a conditional write: `written`, its returned attributes (an empty
   * item when it returns none); or, when its condition failed, no `written`
   * and the `current` item when the server returned it with the refusal
   * (`ReturnValuesOnConditionCheckFailure`). Any other error is thrown.
   */
  private async conditional(command: {
    input: object;
  }): Promise<{ written?: Item; current?: Item }> {
    try {
      const output = (await this.client.send(
        command as Parameters<DynamoDBClient['send']>[0],
      )) as { Attributes?: Item };
      return { written: output.Attributes ?? {} };
    } catch (error) {
      if (isConditionFailure(error)) {
        return { current: error.Item as Item | undefined };
      }
      throw error;
    }
  }

  private keyOf(lease: {
    scope: string;
    key: string;
  }): Record<string, AttributeValue> {
    return { pk: str(partitionKey(lease.scope, lease.key)) };
  }
}

/**
 * Whether an item is a claim in progress of `owner` (and of the request of
 * `fingerprint`, when given).
 */
function ownedBy(item: Item, owner: string, fingerprint?: string): boolean {
  return (
    inProgress(item) &&
    stringOf(item.owner) === owner &&
    (fingerprint === undefined || stringOf(item.fingerprint) === fingerprint)
  );
}

/** Whether an item is a record that the attempt `owner` finished. */
function finishedBy(item: Item, owner: string): boolean {
  return !inProgress(item) && stringOf(item.owner) === owner;
}

/** Whether a duplicate waits for the claim of an item. */
function isWaiting(item: Item): boolean {
  return Boolean(item.waiting && 'BOOL' in item.waiting && item.waiting.BOOL);
}
