import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import type {
  ForgottenBatch,
  RecordInspection,
  RecordPage,
  RecordQuery,
  RecordState,
  RecordSummary,
  ResetOutcome,
} from '../../interfaces/idempotency-store.interface.js';
import { ForgetPasses } from '../forget-passes.js';
import { decodeCursor, encodeCursor } from '../record-cursor.js';
import { inProgress, markedBound } from './dynamodb-conditions.js';
import {
  type Item,
  itemKey,
  num,
  numberOf,
  partitionKey,
  recordOf,
  stepsOf,
  str,
  stringOf,
} from './dynamodb-item.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { loadDynamoDbSdk } from './dynamodb-sdk.js';

/** Items a Scan reads per page. */
const SCAN_LIMIT = 1000;
/** How many times a reset reads again an item that changed under it. */
const RACES = 5;

const dateOf = (ms: number | undefined) =>
  ms === undefined ? undefined : new Date(ms);

/** Whether an item's key is bound to its request at `now`. */
function boundNow(item: Item, now: number): boolean {
  return (
    markedBound(item) ||
    (numberOf(item.bound_until) ?? 0) > now ||
    stepsOf(item).size > 0
  );
}

function summaryOf(item: Item, now: number): RecordSummary {
  const claim = inProgress(item);
  const owner = claim ? stringOf(item.owner) : undefined;
  return {
    scope: stringOf(item.scope) ?? '',
    key: stringOf(item.key) ?? '',
    status: stringOf(item.status) as RecordState,
    fingerprint: stringOf(item.fingerprint) ?? '',
    method: stringOf(item.method),
    path: stringOf(item.path),
    owner,
    leaseExpiresAt: owner ? dateOf(numberOf(item.lease_expires_at)) : undefined,
    generation: stringOf(item.generation),
    bound: claim && boundNow(item, now),
    createdAt: dateOf(numberOf(item.claimed_at)),
    completedAt: dateOf(numberOf(item.completed_at)),
    expiresAt: new Date(
      Math.max(numberOf(item.expires_at) ?? 0, numberOf(item.bound_until) ?? 0),
    ),
  };
}

/** @internal `IdempotencyStore.inspectRecord`: one consistent GetItem. */
export async function inspectDynamoDbRecord(
  records: DynamoDbRecords,
  scope: string,
  key: string,
  withBody: boolean,
): Promise<RecordInspection | undefined> {
  const item = await records.read({ scope, key, owner: '' });
  if (!item) {
    return undefined;
  }
  const stored = recordOf(item);
  return {
    ...summaryOf(item, Date.now()),
    response:
      numberOf(item.response_status) === undefined
        ? undefined
        : {
            status: stored.response.status,
            headers: stored.response.headers,
            ...(withBody ? { body: stored.response.body } : {}),
          },
    steps: [...stepsOf(item)].map(([step, saved]) => ({
      step,
      expiresAt: new Date(saved.expiresAt),
    })),
  };
}

/**
 * @internal `IdempotencyStore.listRecords`: a consistent Scan filtered by
 * the query, in the table's order; the cursor is the key of the last item
 * listed, where the next page's Scan starts.
 */
export async function listDynamoDbRecords(
  records: DynamoDbRecords,
  query: RecordQuery,
): Promise<RecordPage> {
  const sdk = await loadDynamoDbSdk();
  const values: Record<string, AttributeValue> = {};
  query.statuses.forEach((status, i) => (values[`:s${i}`] = str(status)));
  const filters = [`#status IN (${Object.keys(values).join(', ')})`];
  if (query.scope !== undefined) {
    values[':scope'] = str(query.scope);
    filters.push('#scope = :scope');
  }
  if (query.olderThan !== undefined) {
    // A finished record made by a store without `claimed_at`: by its completion.
    values[':older'] = num(query.olderThan.getTime());
    filters.push(
      '(claimed_at < :older OR (attribute_not_exists(claimed_at) AND completed_at < :older))',
    );
  }
  let start: Item | undefined =
    query.cursor === undefined
      ? undefined
      : { pk: str(decodeCursor(query.cursor, 1)[0]) };
  const found: RecordSummary[] = [];
  const now = Date.now();
  do {
    const page = await records.client.send(
      new sdk.ScanCommand({
        TableName: records.tableName,
        FilterExpression: filters.join(' AND '),
        ExpressionAttributeNames: {
          '#status': 'status',
          ...(query.scope === undefined ? {} : { '#scope': 'scope' }),
        },
        ExpressionAttributeValues: values,
        ExclusiveStartKey: start,
        ConsistentRead: true,
        Limit: SCAN_LIMIT,
      }),
    );
    for (const item of page.Items ?? []) {
      found.push(summaryOf(item, now));
      if (found.length === query.limit) {
        return {
          records: found,
          cursor: encodeCursor([stringOf(item.pk) ?? '']),
        };
      }
    }
    start = page.LastEvaluatedKey;
  } while (start);
  return { records: found };
}

/**
 * @internal `IdempotencyStore.resetRecord`: a consistent read, then one
 * write conditioned on the state read (read again if it changed). A claim
 * whose key is bound to its request, or held by an owner, loses its owner
 * and lease as a release leaves it (its generation and steps kept); any
 * other item is deleted. The owner's writes, fenced by its token, find no claim of theirs.
 */
export async function resetDynamoDbRecord(
  records: DynamoDbRecords,
  scope: string,
  key: string,
  force: boolean,
): Promise<ResetOutcome> {
  const sdk = await loadDynamoDbSdk();
  for (let race = 0; race < RACES; race += 1) {
    const item = await records.read({ scope, key, owner: '' });
    if (!item) {
      return { state: 'absent' };
    }
    const now = Date.now();
    const owner = inProgress(item) ? stringOf(item.owner) : undefined;
    const leaseMs = Math.max(0, (numberOf(item.lease_expires_at) ?? 0) - now);
    if (owner !== undefined && leaseMs > 0 && !force) {
      return { state: 'held', owner, leaseMs };
    }
    // The state read, as the write's condition.
    const seen =
      '#status = :seenStatus AND ' +
      (stringOf(item.owner) === undefined
        ? 'attribute_not_exists(#owner)'
        : '#owner = :seenOwner');
    const values: Record<string, AttributeValue> = {
      ':seenStatus': item.status,
      ...(item.owner ? { ':seenOwner': item.owner } : {}),
    };
    const names = { '#status': 'status', '#owner': 'owner' };
    const written =
      // A bound claim, or one held (its attempt may have derived keys from
      // its generation), keeps its generation, as a takeover does.
      inProgress(item) && (boundNow(item, now) || owner !== undefined)
        ? await records.fenced(
            new sdk.UpdateItemCommand({
              TableName: records.tableName,
              Key: itemKey({ scope, key }),
              UpdateExpression:
                'SET lease_expires_at = :zero REMOVE #owner, waiting',
              ConditionExpression: seen,
              ExpressionAttributeNames: names,
              ExpressionAttributeValues: { ...values, ':zero': num(0) },
            }),
          )
        : await records.fenced(
            new sdk.DeleteItemCommand({
              TableName: records.tableName,
              Key: itemKey({ scope, key }),
              ConditionExpression: seen,
              ExpressionAttributeNames: names,
              ExpressionAttributeValues: values,
            }),
          );
    if (written) {
      return { state: 'reset', fenced: owner !== undefined };
    }
  }
  throw new Error(
    `Resetting the record raced ${RACES} concurrent writes of the same key`,
  );
}

/** What a deleted item held: a record and its steps, or a count of failures. */
function rowsOf(old: Item | undefined): { records: number; steps: number } {
  if (!old || stringOf(old.status) === 'counted') {
    return { records: 0, steps: 0 };
  }
  return { records: 1, steps: stepsOf(old).size };
}

/**
 * @internal The Scan-driven forget of the DynamoDB store. A scope's items
 * (records, and counts of failures, which carry their scope too) are
 * found by a consistent Scan filtered on the scope, and deleted by
 * BatchWriteItem (unconditional: an item's key is the digest of its scope
 * and key, so whatever it holds now is the scope's; a claim among them is
 * fenced out): DynamoDB holds nothing between two. The counts returned
 * are of the items as the Scan read them. A pass that
 * deleted anything is followed by another from the start, so that the
 * last batch says no more when a whole pass found nothing of the scope.
 */
export class DynamoDbForget {
  private readonly forgets: ForgetPasses<Item, Item>;

  constructor(private readonly records: DynamoDbRecords) {
    this.forgets = new ForgetPasses<Item, Item>({
      scan: (scope, start) => this.scan(scope, start),
      rows: (item) => {
        const { records: n, steps } = rowsOf(item);
        return Math.max(1, n + steps);
      },
      remove: async (taken) => {
        const items = taken.map(({ item }) => item);
        await this.deleteAll(items);
        return items.map(rowsOf);
      },
      divisible: false,
    });
  }

  async forget(
    scope: string,
    key: string | undefined,
    batchSize: number,
  ): Promise<ForgottenBatch> {
    if (key === undefined) {
      return this.forgets.batch(scope, batchSize);
    }
    const pk = partitionKey(scope, key);
    const [record] = await Promise.all(
      [pk, `${pk}#failures`].map((name) => this.delete(str(name))),
    );
    return { ...rowsOf(record), more: false };
  }

  /** The next page of a consistent Scan of the table for `scope`'s items. */
  private async scan(
    scope: string,
    start: Item | undefined,
  ): Promise<{ found: Item[]; next: Item | undefined }> {
    const sdk = await loadDynamoDbSdk();
    const page = await this.records.client.send(
      new sdk.ScanCommand({
        TableName: this.records.tableName,
        FilterExpression: '#scope = :scope',
        ProjectionExpression: 'pk, #status, steps',
        ExpressionAttributeNames: { '#scope': 'scope', '#status': 'status' },
        ExpressionAttributeValues: { ':scope': str(scope) },
        ExclusiveStartKey: start,
        ConsistentRead: true,
        Limit: SCAN_LIMIT,
      }),
    );
    return { found: page.Items ?? [], next: page.LastEvaluatedKey };
  }

  /**
   * Deletes items by BatchWriteItem, 25 a request (its most), sending
   * again what DynamoDB left unprocessed.
   */
  private async deleteAll(items: readonly Item[]): Promise<void> {
    const sdk = await loadDynamoDbSdk();
    const requests = [];
    for (let from = 0; from < items.length; from += 25) {
      requests.push(
        items.slice(from, from + 25).map((item) => ({
          DeleteRequest: { Key: { pk: item.pk } },
        })),
      );
    }
    await Promise.all(
      requests.map(async (chunk) => {
        let left: typeof chunk | undefined = chunk;
        while (left && left.length > 0) {
          const { UnprocessedItems: unprocessed } =
            await this.records.client.send(
              new sdk.BatchWriteItemCommand({
                RequestItems: { [this.records.tableName]: left },
              }),
            );
          left = unprocessed?.[this.records.tableName] as typeof chunk;
        }
      }),
    );
  }

  /** Deletes an item: what it held, if it was there. */
  private async delete(
    pk: AttributeValue | undefined,
  ): Promise<Item | undefined> {
    const sdk = await loadDynamoDbSdk();
    const { Attributes: old } = await this.records.client.send(
      new sdk.DeleteItemCommand({
        TableName: this.records.tableName,
        Key: { pk: pk! },
        ReturnValues: 'ALL_OLD',
      }),
    );
    return old;
  }
}
