import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type { StepLease } from '../../interfaces/idempotency-store.interface.js';
import { IdempotencyStepTooLargeError } from '../../exceptions/idempotency-step-too-large.error.js';
import {
  IN_PROGRESS,
  OWNED_CONDITION,
  OWNED_NAMES,
  ownedBy,
  stepReadable,
} from './dynamodb-conditions.js';
import {
  DYNAMODB_ITEM_LIMIT_BYTES,
  RECORD_OVERHEAD_BYTES,
  itemKey,
  num,
  resultOf,
  stepsOf,
  str,
} from './dynamodb-item.js';
import { DynamoDbLease } from './dynamodb-lease.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { isItemTooLarge, loadDynamoDbSdk } from './dynamodb-sdk.js';

/**
 * @internal A step's result of the lease's request, read strongly
 * consistent; none past its expiry, and never another request's
 * (fingerprint).
 */
export async function readStepResult(
  records: DynamoDbRecords,
  lease: StepLease,
  step: string,
): Promise<{ result: unknown } | undefined> {
  const sdk = await loadDynamoDbSdk();
  const { Item: item } = await records.client.send(
    new sdk.GetItemCommand({
      TableName: records.tableName,
      Key: itemKey(lease),
      ProjectionExpression: 'steps.#step',
      ExpressionAttributeNames: { '#step': step },
      ConsistentRead: true,
    }),
  );
  const saved = item ? stepsOf(item).get(step) : undefined;
  return saved && stepReadable(saved, lease.fingerprint, Date.now())
    ? { result: resultOf(saved) }
    : undefined;
}

/**
 * @internal Writes a step's result, with the lease's fingerprint, into the
 * claim's item (`steps`), fenced by the owner and the claim's fingerprint,
 * and binds the key to the request until the step expires: `bound_until` is
 * raised to the step's expiry in the same write, never lowered (a step saved
 * with a shorter time to live than an earlier one is written by a second
 * write that leaves it). A result in bytes (sealed by the `encryption`
 * option) is kept as a binary attribute, a third smaller than its base64;
 * any other as its JSON.
 * @returns false when the claim was lost.
 * @throws IdempotencyStepTooLargeError when the item would exceed
 * DynamoDB's 400 KB, before writing (or as DynamoDB refuses the write).
 */
export async function saveStepResult(
  records: DynamoDbRecords,
  lease: StepLease,
  step: string,
  result: unknown,
  ttlMs: number,
): Promise<boolean> {
  const json = Buffer.isBuffer(result)
    ? undefined
    : JSON.stringify(result ?? null);
  const stored: AttributeValue =
    json === undefined ? { B: result as Buffer } : str(json);
  const bytes =
    json === undefined ? (result as Buffer).length : Buffer.byteLength(json);
  // What the step may take of the item: what the record and the step's
  // name and fingerprint leave of it (earlier steps are DynamoDB's to count).
  const room =
    DYNAMODB_ITEM_LIMIT_BYTES -
    Buffer.byteLength(step) -
    Buffer.byteLength(lease.fingerprint) -
    RECORD_OVERHEAD_BYTES;
  const tooLarge = () =>
    new IdempotencyStepTooLargeError(
      step,
      bytes,
      room,
      "it does not fit in DynamoDB's item of 400 KB, which holds the record and all the steps of its key: store a reference to the result instead",
    );
  if (bytes > room) {
    throw tooLarge();
  }
  const sdk = await loadDynamoDbSdk();
  const expiresAt = num(Date.now() + ttlMs);
  const write = (raise: boolean) =>
    new sdk.UpdateItemCommand({
      TableName: records.tableName,
      Key: itemKey(lease),
      UpdateExpression: raise
        ? 'SET steps.#step = :step, bound_until = :expires'
        : 'SET steps.#step = :step',
      ConditionExpression:
        `${OWNED_CONDITION} AND fingerprint = :fingerprint AND ` +
        (raise
          ? '(attribute_not_exists(bound_until) OR bound_until <= :expires)'
          : 'bound_until > :expires'),
      ExpressionAttributeNames: { ...OWNED_NAMES, '#step': step },
      ExpressionAttributeValues: {
        ':step': {
          M: { r: stored, e: expiresAt, f: str(lease.fingerprint) },
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
    const raised = await records.conditional(write(true));
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
    return (await records.fenced(write(false))) !== undefined;
  } catch (error) {
    throw isItemTooLarge(error) ? tooLarge() : error;
  }
}

/**
 * @internal Binds the key to the lease's request before a step runs: marks
 * the item `bound` in one conditional UpdateItem fenced by the owner and the
 * claim's fingerprint (acknowledged once durable, as every DynamoDB write).
 * The mark holds until the key completes or expires, through releases and
 * takeovers (see `markedBound`). A request the SDK sends again after a lost
 * reply finds the claim still its own, and writes the same. With
 * `holdMs`, the key stays bound at least that long from now, as by a
 * step's write (`bound_until` raised, never lowered: a key bound longer
 * already is marked by a second write that leaves it).
 * @returns false when the claim was lost.
 */
export async function bindClaim(
  records: DynamoDbRecords,
  lease: StepLease,
  holdMs = 0,
): Promise<boolean> {
  const sdk = await loadDynamoDbSdk();
  const until = num(Date.now() + holdMs);
  const write = (raise: boolean) =>
    new sdk.UpdateItemCommand({
      TableName: records.tableName,
      Key: itemKey(lease),
      UpdateExpression: raise
        ? 'SET bound = :true, bound_until = :until'
        : 'SET bound = :true',
      ConditionExpression:
        `${OWNED_CONDITION} AND fingerprint = :fingerprint` +
        (raise
          ? ' AND (attribute_not_exists(bound_until) OR bound_until <= :until)'
          : ''),
      ExpressionAttributeNames: OWNED_NAMES,
      ExpressionAttributeValues: {
        ':true': { BOOL: true },
        ':fingerprint': str(lease.fingerprint),
        ':owner': str(lease.owner),
        ':inProgress': IN_PROGRESS,
        ...(raise ? { ':until': until } : {}),
      },
      ReturnValues: 'NONE',
      ReturnValuesOnConditionCheckFailure: raise ? 'ALL_OLD' : 'NONE',
    });
  let bound = false;
  if (holdMs > 0) {
    const raised = await records.conditional(write(true));
    if (
      raised.written === undefined &&
      raised.current &&
      !ownedBy(raised.current, lease.owner, lease.fingerprint)
    ) {
      return false;
    }
    bound = raised.written !== undefined;
  }
  // Bound longer already (or the server did not say why): the mark alone,
  // still fenced.
  if (!bound && (await records.fenced(write(false))) === undefined) {
    return false;
  }
  DynamoDbLease.bound(lease);
  return true;
}
