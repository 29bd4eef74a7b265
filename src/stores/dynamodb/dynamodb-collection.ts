import { randomUUID } from 'node:crypto';
import type { AbandonedKey } from '../../interfaces/idempotency-store.interface.js';
import {
  CLAIMABLE_CONDITION,
  IN_PROGRESS,
  collectable,
  inProgress,
} from './dynamodb-conditions.js';
import {
  type Item,
  num,
  resultOf,
  stepsOf,
  stringOf,
} from './dynamodb-item.js';
import type { DynamoDbRecords } from './dynamodb-records.js';
import { type DynamoDbSdk, loadDynamoDbSdk } from './dynamodb-sdk.js';

/**
 * How long a collector holds an item whose steps it reports (ms): far
 * longer than it takes; one that stopped meanwhile leaves the item to the
 * next collection after it.
 */
const COLLECTING_LEASE_MS = 60_000;

/**
 * @internal The collection of expired records and steps: a Scan of the
 * table that goes on, one page per call, where the previous call stopped.
 */
export class DynamoDbCollection {
  /** Where the Scan resumes (undefined: at the start). */
  private cursor: Item | undefined;

  /**
   * @param scanPageSize how many items one call reads (one Scan page).
   */
  constructor(
    private readonly records: DynamoDbRecords,
    private readonly scanPageSize: number,
  ) {}

  /**
   * Deletes the records of the next Scan page past their expiry, at most
   * `batchSize`, and hands the expired steps of each key over to `abandoned`
   * before deleting them (a failed hand-over deletes nothing of its key).
   * Every deletion is conditional on the item being as read.
   * @returns `more` while the Scan has not reached the end of the table.
   */
  async collect(
    batchSize: number,
    abandoned: (key: AbandonedKey) => void,
  ): Promise<{ removed: number; more: boolean }> {
    const sdk = await loadDynamoDbSdk();
    const page = await this.records.client.send(
      new sdk.ScanCommand({
        TableName: this.records.tableName,
        Limit: this.scanPageSize,
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
    sdk: DynamoDbSdk,
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
    if (expired.length > 0 && inProgress(item)) {
      // Reported by one collector: the one that holds the item's
      // `collecting` lease, taken as the steps were read. Another one
      // collecting at once (its Scan read the item too) skips it.
      const token = randomUUID();
      const held = await this.records.fenced(
        new sdk.UpdateItemCommand({
          TableName: this.records.tableName,
          Key: key,
          UpdateExpression:
            'SET collecting = :token, collecting_until = :until',
          ConditionExpression: [
            'attribute_exists(pk)',
            '(attribute_not_exists(collecting_until) OR collecting_until < :now)',
            ...unchanged,
          ].join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: {
            ...values,
            ':token': { S: token },
            ':until': num(now + COLLECTING_LEASE_MS),
            ':now': num(now),
          },
        }),
      );
      if (!held) {
        return 0;
      }
      unchanged.push('collecting = :token');
      values[':token'] = { S: token };
      try {
        abandoned({
          scope: stringOf(item.scope) ?? '',
          key: stringOf(item.key) ?? '',
          steps: expired.map(([step, { result }]) => ({
            step,
            result: resultOf({ result }),
          })),
        });
      } catch (error) {
        // Left to the next collection at once.
        await this.records
          .fenced(
            new sdk.UpdateItemCommand({
              TableName: this.records.tableName,
              Key: key,
              UpdateExpression: 'REMOVE collecting, collecting_until',
              ConditionExpression: 'collecting = :token',
              ExpressionAttributeValues: { ':token': { S: token } },
            }),
          )
          .catch(() => undefined);
        throw error;
      }
    }
    if (deleteRecord) {
      names['#status'] = 'status';
      values[':now'] = num(now);
      values[':inProgress'] = IN_PROGRESS;
      values[':expires'] = item.expires_at ?? num(0);
      const deleted = await this.records.fenced(
        new sdk.DeleteItemCommand({
          TableName: this.records.tableName,
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
    const updated = await this.records.fenced(
      new sdk.UpdateItemCommand({
        TableName: this.records.tableName,
        Key: key,
        UpdateExpression: `REMOVE ${[
          ...expired.map((_, index) => `steps.#s${index}`),
          ...(values[':token'] ? ['collecting', 'collecting_until'] : []),
        ].join(', ')}`,
        ConditionExpression: unchanged.join(' AND '),
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
        ReturnValues: 'ALL_OLD',
      }),
    );
    return updated ? expired.length : 0;
  }
}
