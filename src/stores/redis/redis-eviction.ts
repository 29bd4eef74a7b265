import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import { IdempotencyConfigurationError } from '../../exceptions/idempotency-configuration.error.js';
import { withinStoreTime } from '../../core/store-deadline.js';
import type { RedisClient } from './redis-client.js';

const logger = new Logger('Idempotency');

/** The only `maxmemory-policy` under which Redis never drops a key it holds. */
const NO_EVICTION = 'noeviction';
/** How long the start waits for a server's policy before it goes on unchecked. */
const CHECK_MS = 5_000;

/**
 * The `maxmemory-policy` of a server: from `CONFIG GET`, else (where
 * `CONFIG` is renamed away, as managed services do) from `INFO memory`;
 * `undefined` when neither answers.
 */
async function policyOf(node: Redis): Promise<string | undefined> {
  try {
    const [, policy] = (await node.config('GET', 'maxmemory-policy')) as [
      string?,
      string?,
    ];
    if (policy) {
      return policy;
    }
  } catch {
    // Renamed or refused: INFO says it too.
  }
  try {
    return /^maxmemory_policy:(\S+)/m.exec(await node.info('memory'))?.[1];
  } catch {
    return undefined;
  }
}

/**
 * @internal Refuses a Redis that evicts keys under memory pressure: the
 * store's records, generations and steps carry expiries, so that every
 * policy but `noeviction` (`allkeys-*` and `volatile-*` alike) may drop one
 * when memory is full, silently. A record dropped runs its request again
 * (a second charge); a step dropped runs its effect again. Under
 * `noeviction`, a write Redis cannot take is refused, and the request gets
 * a `503`. A server whose policy cannot be read (neither `CONFIG` nor
 * `INFO` allowed, or not reachable now) is logged, not refused.
 * @throws IdempotencyConfigurationError for a server of another policy.
 */
export async function refuseEviction(client: RedisClient): Promise<void> {
  const nodes =
    typeof (client as Cluster).nodes === 'function'
      ? (client as Cluster).nodes('master')
      : [client as Redis];
  let policies: Array<string | undefined>;
  try {
    policies = await withinStoreTime(
      Promise.all(nodes.map(policyOf)),
      CHECK_MS,
      'maxmemory-policy check',
    );
  } catch {
    // Not reachable at start: said below.
    policies = [undefined];
  }
  const evicting = policies.find(
    (policy) => policy !== undefined && policy !== NO_EVICTION,
  );
  if (evicting !== undefined) {
    throw new IdempotencyConfigurationError(
      `The Redis of the idempotency store evicts keys when its memory is full (maxmemory-policy ${evicting}): a record it dropped would run its request again, a step it dropped its effect again, without a word.`,
      'Set `maxmemory-policy noeviction` on that Redis (a write it cannot take is then a 503), or give the store a Redis of its own that has it; `allowEviction: true` starts anyway, for a Redis whose memory is never full.',
    );
  }
  if (policies.includes(undefined)) {
    logger.warn(
      `Redis's maxmemory-policy could not be read (CONFIG and INFO refused, or the server not reachable at start): the idempotency store needs \`noeviction\`, or a record or step evicted when memory is full runs its request or effect again.`,
    );
  }
}
