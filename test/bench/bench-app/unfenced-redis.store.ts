import {
  RedisIdempotencyStore,
  type RedisIdempotencyStoreOptions,
} from 'nestjs-idempotency/redis';
import type { Redis } from 'ioredis';
import type {
  Completion,
  FencedWrite,
  Lease,
} from '../../../src/interfaces/idempotency-store.interface.js';
import { claimLinesOf } from '../../../src/stores/redis/redis-claim.js';
import { RedisKeys } from '../../../src/stores/redis/redis-keys.js';
import { batchWrites } from '../../../src/stores/redis/redis-client.js';
import {
  finishedValue,
  statusLetter,
} from '../../../src/stores/redis/redis-record.js';

/**
 * The Redis store with one change, for the modes bench only (never a store
 * to use): a completion is a plain `SET <record> <finished> PX <ttl>`,
 * unconditional, as @node-idempotency/nestjs completes, instead of the
 * completion fenced by the attempt's owner (the script on Redis 7, `SET …
 * IFEQ` where the server has it). Everything else (the claim, its lease,
 * the fingerprint, the held response) is the store's and the module's, so
 * that the difference between this mode and the store's is what the fence
 * costs. Not fenced, a completion of an attempt whose lease was taken over
 * overwrites the record of the attempt that took it over.
 */
export class UnfencedRedisStore extends RedisIdempotencyStore {
  private readonly keyNames: RedisKeys;

  constructor(client: Redis, options: RedisIdempotencyStoreOptions) {
    super(client, options);
    this.keyNames = new RedisKeys(this.options.prefix);
    // No completion tries `SET … IFEQ` here: the claims send no `EXISTS`
    // of the key's steps for it, as on a server without the option.
    (this as unknown as { plain: { ifEq?: boolean } }).plain.ifEq = false;
  }

  override async complete(
    lease: Lease,
    completion: Completion,
  ): Promise<FencedWrite> {
    const { response } = completion;
    const lines = claimLinesOf(lease);
    if (!('body' in response) || !lines || completion.ttlMs <= 0) {
      return super.complete(lease, completion);
    }
    const ttlMs = Math.ceil(completion.ttlMs);
    const head = `${statusLetter(completion.status)} ${Date.now() + ttlMs} ${response.status}`;
    // In the write of the commands in flight, as the store's own.
    batchWrites(this.client);
    await this.client.set(
      this.keyNames.record(RedisKeys.id(lease.scope, lease.key)),
      finishedValue(
        head,
        lines,
        JSON.stringify(response.headers),
        response.body,
      ),
      'PX',
      ttlMs,
    );
    return { fenced: true, waiting: false };
  }
}
