import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';

/** The AWS SDK's DynamoDB module, as the store uses it. */
export type DynamoDbSdk = typeof import('@aws-sdk/client-dynamodb');

let loading: Promise<DynamoDbSdk> | undefined;

/**
 * @internal Loads the AWS SDK's DynamoDB client module once, when a DynamoDB
 * store first sends a command: applications on another store never load it.
 */
export function loadDynamoDbSdk(): Promise<DynamoDbSdk> {
  loading ??= import('@aws-sdk/client-dynamodb').catch((error: unknown) => {
    loading = undefined;
    throw new IdempotencyConfigurationError(
      `The DynamoDB store could not load @aws-sdk/client-dynamodb (${String(error)}).`,
      'Install it next to this package: `npm install @aws-sdk/client-dynamodb`.',
    );
  });
  return loading;
}

/** Whether `error` is DynamoDB's refusal of a write's condition. */
export function isConditionFailure(
  error: unknown,
): error is Error & { Item?: Record<string, unknown> } {
  return (
    error instanceof Error && error.name === 'ConditionalCheckFailedException'
  );
}

/** Whether `error` is DynamoDB's refusal of an item over 400 KB. */
export function isItemTooLarge(error: unknown): boolean {
  return (
    error instanceof Error &&
    error.name === 'ValidationException' &&
    /item size/i.test(error.message)
  );
}
