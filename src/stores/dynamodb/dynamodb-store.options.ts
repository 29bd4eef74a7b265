/** Options of the {@link DynamoDbIdempotencyStore}. */
export interface DynamoDbIdempotencyStoreOptions {
  /**
   * Name of the table that holds the records (one item per scope and key,
   * partition key `pk`, no sort key): create it with
   * `DynamoDbIdempotencyStore.createTable()`.
   * @default 'idempotency_records'
   */
  readonly tableName?: string;
  /**
   * How many items one collection reads per Scan page (a page is read with
   * one request; `collect(batchSize)` deletes at most `batchSize` of them).
   * @default 100
   */
  readonly scanPageSize?: number;
}

/** The options with their defaults applied. */
export interface ResolvedDynamoDbStoreOptions {
  readonly tableName: string;
  readonly scanPageSize: number;
}

/** Default name of the DynamoDB table. */
export const DEFAULT_DYNAMODB_TABLE_NAME = 'idempotency_records';
