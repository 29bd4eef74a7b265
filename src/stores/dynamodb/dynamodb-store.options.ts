import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';

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
   * one request; `collect(batchSize)` deletes at most `batchSize` of them, and
   * the next call goes on where it stopped). An integer from 1 to 10000.
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

/**
 * @internal The options with their defaults, or an
 * {@link IdempotencyConfigurationError} that tells what to fix.
 */
export function resolveDynamoDbStoreOptions(
  options: DynamoDbIdempotencyStoreOptions,
): ResolvedDynamoDbStoreOptions {
  const tableName = options.tableName ?? DEFAULT_DYNAMODB_TABLE_NAME;
  if (!/^[a-zA-Z0-9_.-]{3,255}$/.test(tableName)) {
    throw new IdempotencyConfigurationError(
      `The DynamoDB store's tableName ${JSON.stringify(tableName)} is not a DynamoDB table name.`,
      'Use 3 to 255 letters, digits, `_`, `-` or `.`, or leave it out for the default `idempotency_records`.',
    );
  }
  const scanPageSize = options.scanPageSize ?? 100;
  if (
    !Number.isInteger(scanPageSize) ||
    scanPageSize < 1 ||
    scanPageSize > 10_000
  ) {
    throw new IdempotencyConfigurationError(
      `The DynamoDB store's scanPageSize ${String(scanPageSize)} is not an integer from 1 to 10000.`,
      'Leave it out for the default of 100 items per Scan page.',
    );
  }
  return { tableName, scanPageSize };
}
