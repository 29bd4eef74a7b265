export { RedisIdempotencyStore } from './redis.store.js';
export type { RedisIdempotencyStoreOptions } from './redis-store.options.js';
