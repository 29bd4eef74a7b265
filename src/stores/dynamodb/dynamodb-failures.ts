import type { FailureKey } from '../../interfaces/idempotency-store.interface.js';
import { num, numberOf, partitionKey, str } from './dynamodb-item.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { loadDynamoDbSdk } from './dynamodb-sdk.js';
import { DYNAMODB_TTL_ATTRIBUTE } from './dynamodb-table.js';

/** How many times a count is tried again when another one raced it. */
const RACES = 5;

/** The partition key of the item that counts a key's failed attempts. */
function failuresKey(key: FailureKey) {
  return str(`${partitionKey(key.scope, key.key)}#failures`);
}

/** @internal Deletes the item that counts a key's failed attempts. */
export async function forgetFailures(
  records: DynamoDbRecords,
  key: FailureKey,
): Promise<void> {
  const sdk = await loadDynamoDbSdk();
  await records.client.send(
    new sdk.DeleteItemCommand({
      TableName: records.tableName,
      Key: { pk: failuresKey(key) },
    }),
  );
}

/**
 * @internal Counts a failed attempt of a key in an item of its own (the
 * record's partition key and `#failures`, which no record's can be: a
 * record's is a digest of fixed length), which a release of the claim
 * leaves alone. The item expires `ttlMs` after the last failure: its
 * `status` (`counted`) and `expires_at` let the collection delete it, its
 * `ttl` lets DynamoDB's Time to Live do it. One conditional UpdateItem
 * adds to a live count; a count that expired (or none) starts again with a
 * conditional PutItem; either one refused by a concurrent count is tried
 * again.
 */
export async function countFailure(
  records: DynamoDbRecords,
  key: FailureKey,
  ttlMs: number,
): Promise<number> {
  const sdk = await loadDynamoDbSdk();
  const pk = failuresKey(key);
  for (let race = 0; race < RACES; race += 1) {
    const now = Date.now();
    const expiresAt = now + ttlMs;
    const names = { '#ttl': DYNAMODB_TTL_ATTRIBUTE, '#status': 'status' };
    const values = {
      ':now': num(now),
      ':expires': num(expiresAt),
      ':ttl': num(Math.ceil(expiresAt / 1000)),
      ':counted': str('counted'),
    };
    const added = await records.fenced(
      new sdk.UpdateItemCommand({
        TableName: records.tableName,
        Key: { pk },
        UpdateExpression:
          'ADD failures :one SET expires_at = :expires, #ttl = :ttl, #status = :counted',
        ConditionExpression: 'attribute_exists(pk) AND expires_at > :now',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ...values, ':one': num(1) },
        ReturnValues: 'UPDATED_NEW',
      }),
    );
    if (added) {
      return numberOf(added.failures) ?? 1;
    }
    const started = await records.fenced(
      new sdk.PutItemCommand({
        TableName: records.tableName,
        Item: {
          pk,
          scope: str(key.scope),
          key: str(key.key),
          status: values[':counted'],
          failures: num(1),
          expires_at: values[':expires'],
          [DYNAMODB_TTL_ATTRIBUTE]: values[':ttl'],
        },
        ConditionExpression: 'attribute_not_exists(pk) OR expires_at <= :now',
        ExpressionAttributeValues: { ':now': values[':now'] },
      }),
    );
    if (started) {
      return 1;
    }
  }
  throw new Error(
    `Counting a failed attempt raced ${RACES} concurrent counts of the same key`,
  );
}
