import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';

/** Options of the {@link RedisIdempotencyStore}. */
export interface RedisIdempotencyStoreOptions {
  /**
   * Prefix of every key the store writes and of its pub/sub channel, so that
   * it shares a database with anything else. Must not contain `{` or `}`
   * (the store puts its own hash tag after it).
   * @default 'idempotency:'
   */
  readonly prefix?: string;
  /**
   * Largest response the store keeps (body bytes plus the JSON of the
   * headers). A larger one is recorded as not replayable, with its status
   * only: the client that made the request gets its response, a duplicate
   * gets `422`, as for a body over the module's `maxResponseSize` (1 MiB by
   * default). Protects Redis, which holds every value in memory and blocks
   * while it copies one.
   * @default 8388608 (8 MiB)
   */
  readonly maxResponseBytes?: number;
  /**
   * How long Redis keeps the recovery points of a request after they expire,
   * so that the collector can hand them over (`IdempotencyCollector`, the
   * `abandoned` callback) before deleting them. Without a collection in that
   * time, Redis deletes them unreported.
   * @default 3600000 (1 hour)
   */
  readonly abandonedStepsGraceMs?: number;
  /**
   * Start on a Redis whose `maxmemory-policy` evicts keys (any policy but
   * `noeviction`), which the store otherwise refuses at start with an
   * `IdempotencyConfigurationError`: when its memory is full, such a Redis
   * drops records and steps without a word, and a dropped record runs its
   * request again (a second charge). Only for a Redis whose memory is
   * never full.
   * @default false
   */
  readonly allowEviction?: boolean;
}

/** @internal The options with their defaults. */
export type ResolvedRedisStoreOptions = Required<RedisIdempotencyStoreOptions>;

/** @internal Defaults of {@link RedisIdempotencyStoreOptions}. */
export const REDIS_STORE_DEFAULTS: ResolvedRedisStoreOptions = {
  prefix: 'idempotency:',
  maxResponseBytes: 8 * 1024 * 1024,
  abandonedStepsGraceMs: 3_600_000,
  allowEviction: false,
};

function count(name: string, value: unknown): void {
  if (!(Number.isSafeInteger(value) && (value as number) >= 0)) {
    throw new IdempotencyConfigurationError(
      `Invalid "${name}" of the Redis store: ${String(value)}.`,
      `Set "${name}" to a whole number of at least 0, or leave it out for the default (${String(REDIS_STORE_DEFAULTS[name as keyof ResolvedRedisStoreOptions])}).`,
    );
  }
}

/** @internal Merges the defaults in, refusing an invalid option. */
export function resolveRedisStoreOptions(
  options: RedisIdempotencyStoreOptions = {},
): ResolvedRedisStoreOptions {
  const resolved = {
    prefix: options.prefix ?? REDIS_STORE_DEFAULTS.prefix,
    maxResponseBytes:
      options.maxResponseBytes ?? REDIS_STORE_DEFAULTS.maxResponseBytes,
    abandonedStepsGraceMs:
      options.abandonedStepsGraceMs ??
      REDIS_STORE_DEFAULTS.abandonedStepsGraceMs,
    allowEviction: options.allowEviction ?? REDIS_STORE_DEFAULTS.allowEviction,
  };
  if (typeof resolved.prefix !== 'string' || /[{}]/.test(resolved.prefix)) {
    throw new IdempotencyConfigurationError(
      `Invalid "prefix" of the Redis store: ${JSON.stringify(resolved.prefix)}.`,
      'Use a prefix without "{" and "}": the store adds a hash tag of its own after it, so that the keys of a record share a slot of a Redis Cluster.',
    );
  }
  count('maxResponseBytes', resolved.maxResponseBytes);
  count('abandonedStepsGraceMs', resolved.abandonedStepsGraceMs);
  return resolved;
}
