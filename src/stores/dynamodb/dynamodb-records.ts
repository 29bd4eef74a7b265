import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Lease } from '../../interfaces/idempotency-store.interface.js';
import { type Item, itemKey } from './dynamodb-item.js';
import { isConditionFailure, loadDynamoDbSdk } from './dynamodb-sdk.js';

/**
 * What a conditional write did: `written`, its returned attributes (an
 * empty item when it returns none); or, when its condition failed, no
 * `written` and the `current` item when the server returned it with the
 * refusal (`ReturnValuesOnConditionCheckFailure`).
 */
export interface ConditionalWrite {
  readonly written?: Item;
  readonly current?: Item;
}

/**
 * @internal The store's table, as the parts of the store read and write it:
 * the application's client (never closed here) and the table's name, the
 * strongly consistent read of a key's item, and conditional writes.
 */
export class DynamoDbRecords {
  constructor(
    readonly client: DynamoDBClient,
    readonly tableName: string,
  ) {}

  /** The item of a key, read strongly consistent. */
  async read(lease: Lease): Promise<Item | undefined> {
    const sdk = await loadDynamoDbSdk();
    const { Item: item } = await this.client.send(
      new sdk.GetItemCommand({
        TableName: this.tableName,
        Key: itemKey(lease),
        ConsistentRead: true,
      }),
    );
    return item;
  }

  /**
   * Sends a conditional write: its returned attributes (an empty item when it
   * returns none), or undefined when its condition failed.
   */
  async fenced(command: { input: object }): Promise<Item | undefined> {
    return (await this.conditional(command)).written;
  }

  /**
   * Sends a conditional write (see {@link ConditionalWrite}); any error but
   * the refusal of its condition is thrown.
   */
  async conditional(command: { input: object }): Promise<ConditionalWrite> {
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
}
