import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { loadDynamoDbSdk } from './dynamodb-sdk.js';

/** The attribute DynamoDB's TTL reads: a finished record's expiry, epoch seconds. */
export const DYNAMODB_TTL_ATTRIBUTE = 'ttl';

/**
 * @internal Creates the table (on-demand, partition key `pk`), waits until it
 * is active, and enables TTL on {@link DYNAMODB_TTL_ATTRIBUTE}.
 */
export async function createDynamoDbTable(
  client: DynamoDBClient,
  options: { tableName: string; timeToLive: boolean },
): Promise<void> {
  const sdk = await loadDynamoDbSdk();
  const { tableName } = options;
  try {
    await client.send(
      new sdk.CreateTableCommand({
        TableName: tableName,
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );
  } catch (error) {
    if (!(error instanceof sdk.ResourceInUseException)) {
      throw error;
    }
  }
  await sdk.waitUntilTableExists(
    { client, maxWaitTime: 300, minDelay: 1 },
    { TableName: tableName },
  );
  if (options.timeToLive) {
    const { TimeToLiveDescription: ttl } = await client.send(
      new sdk.DescribeTimeToLiveCommand({ TableName: tableName }),
    );
    if (
      ttl?.TimeToLiveStatus !== 'ENABLED' &&
      ttl?.TimeToLiveStatus !== 'ENABLING'
    ) {
      await client.send(
        new sdk.UpdateTimeToLiveCommand({
          TableName: tableName,
          TimeToLiveSpecification: {
            AttributeName: DYNAMODB_TTL_ATTRIBUTE,
            Enabled: true,
          },
        }),
      );
    }
  }
}
