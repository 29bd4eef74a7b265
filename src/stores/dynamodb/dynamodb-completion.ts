import type {
  Completion,
  FencedWrite,
  Lease,
} from '../../interfaces/idempotency-store.interface.js';
import { notReplayable } from '../not-replayable.js';
import {
  IN_PROGRESS,
  OWNED_CONDITION,
  OWNED_NAMES,
  UNMARKED_CONDITION,
  finishedBy,
  isWaiting,
  ownedBy,
} from './dynamodb-conditions.js';
import {
  DYNAMODB_ITEM_LIMIT_BYTES,
  type Item,
  RECORD_OVERHEAD_BYTES,
  itemKey,
  num,
  partitionKey,
  sizeOf,
  str,
} from './dynamodb-item.js';
import { DynamoDbLease } from './dynamodb-lease.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { isItemTooLarge, loadDynamoDbSdk } from './dynamodb-sdk.js';

/**
 * @internal Finishes a claim: writes the response, clears the steps and
 * the key's binding to its request (`bound_until`, `bound`) and sets the
 * TTL attribute in one conditional UpdateItem fenced by the owner. A
 * response too large for the item is recorded as not replayable instead. The key's generation goes
 * too: the record is claimed again only once expired, with a new one, and
 * a claim that finds none writes one in its own request.
 */
export async function completeClaim(
  records: DynamoDbRecords,
  lease: Lease,
  completion: Completion,
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
      return completeClaim(records, lease, notReplayable(completion));
    }
  }
  const expiresAt = Date.now() + completion.ttlMs;
  values[':expires'] = num(expiresAt);
  values[':ttl'] = num(Math.ceil(expiresAt / 1000));
  values[':completed'] = num(Date.now());
  values[':owner'] = str(lease.owner);
  values[':inProgress'] = IN_PROGRESS;
  const sdk = await loadDynamoDbSdk();
  try {
    const outcome = await records.conditional(
      new sdk.UpdateItemCommand({
        TableName: records.tableName,
        Key: itemKey(lease),
        UpdateExpression:
          'SET #status = :status, response_status = :responseStatus,' +
          (stored
            ? ' response_headers = :headers, response_body = :body,'
            : '') +
          ' expires_at = :expires, #ttl = :ttl, completed_at = :completed' +
          ' REMOVE lease_expires_at, steps, waiting, bound_until, generation, bound',
        ConditionExpression: OWNED_CONDITION,
        ExpressionAttributeNames: { ...OWNED_NAMES, '#ttl': 'ttl' },
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
      return completeClaim(records, lease, notReplayable(completion));
    }
    throw error;
  }
}

/**
 * @internal Gives a claim up: deletes its item when its key is not bound to
 * its request (no `bound` mark, no steps) and `bind` is false; otherwise
 * keeps it for the next attempt of the same request, in progress with no
 * owner and its lease run out, its steps, fingerprint, binding and
 * generation kept until the key expires. With `bind`, the key is marked
 * bound in the same write (as by `bind()`). One write, but a second one
 * after a deletion refused for a binding that the lease's handle did not
 * know of (see {@link DynamoDbLease}).
 */
export async function releaseClaim(
  records: DynamoDbRecords,
  lease: Lease,
  bind = false,
): Promise<FencedWrite> {
  const sdk = await loadDynamoDbSdk();
  const fence = {
    ':owner': str(lease.owner),
    ':inProgress': IN_PROGRESS,
    ':zero': num(0),
  };
  const known = DynamoDbLease.isBound(lease);
  let old: Item | undefined;
  if (!bind && !known) {
    const deleted = await records.conditional(
      new sdk.DeleteItemCommand({
        TableName: records.tableName,
        Key: itemKey(lease),
        ConditionExpression:
          `${OWNED_CONDITION} AND ${UNMARKED_CONDITION}` +
          ' AND (attribute_not_exists(steps) OR size(steps) = :zero)',
        ExpressionAttributeNames: OWNED_NAMES,
        ExpressionAttributeValues: { ...fence, ':false': { BOOL: false } },
        ReturnValues: 'ALL_OLD',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    old = deleted.written;
    if (!old && deleted.current && !ownedBy(deleted.current, lease.owner)) {
      return { fenced: false, waiting: false };
    }
  }
  // Bound, to be bound, or refused for its steps or its binding (or the
  // server did not say why): kept, marked bound unless known so already.
  const mark = bind && !known;
  old ??= await records.fenced(
    new sdk.UpdateItemCommand({
      TableName: records.tableName,
      Key: itemKey(lease),
      UpdateExpression: mark
        ? 'SET lease_expires_at = :zero, bound = :true REMOVE #owner, waiting'
        : 'SET lease_expires_at = :zero REMOVE #owner, waiting',
      ConditionExpression: OWNED_CONDITION,
      ExpressionAttributeNames: OWNED_NAMES,
      ExpressionAttributeValues: mark
        ? { ...fence, ':true': { BOOL: true } }
        : fence,
      ReturnValues: 'ALL_OLD',
    }),
  );
  return old
    ? { fenced: true, waiting: isWaiting(old) }
    : { fenced: false, waiting: false };
}
