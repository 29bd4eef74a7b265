import { loadOptionalPeer } from '../../core/optional-peer.js';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';

/** The AWS SDK's DynamoDB module, as the store uses it. */
export type DynamoDbSdk = typeof import('@aws-sdk/client-dynamodb');

let loading: Promise<DynamoDbSdk> | undefined;

/**
 * @internal Loads the AWS SDK's DynamoDB client module once, when a DynamoDB
 * store first sends a command: applications on another store never load it.
 * @throws IdempotencyConfigurationError when the package is not installed;
 * what its import threw when it is there but fails to load.
 */
export function loadDynamoDbSdk(): Promise<DynamoDbSdk> {
  loading ??= loadOptionalPeer(
    '@aws-sdk/client-dynamodb',
    () => import('@aws-sdk/client-dynamodb'),
  )
    .then((sdk) => {
      if (!sdk) {
        throw new IdempotencyConfigurationError(
          'The DynamoDB store could not load @aws-sdk/client-dynamodb (it is not installed).',
          'Install it next to this package: `npm install @aws-sdk/client-dynamodb`.',
        );
      }
      return sdk;
    })
    .catch((error: unknown) => {
      // The next command tries again (the package may be installed by then).
      loading = undefined;
      throw error;
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
