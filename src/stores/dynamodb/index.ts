export { DynamoDbIdempotencyStore } from './dynamodb.store.js';
export type { DynamoDbIdempotencyStoreOptions } from './dynamodb-store.options.js';
