import { readFile } from 'node:fs/promises';
import type { Redis } from 'ioredis';
import { serverIdentity } from '../utils/redis-info.js';

/**
 * The pid of the Redis server, if it runs on this machine (`INFO server`
 * names it, and `/proc` shows a redis-server or valkey-server there).
 */
export async function localRedisPid(redis: Redis): Promise<number | undefined> {
  const pid = Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]);
  try {
    const command = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
    return /^(redis|valkey)-server$/.test(command) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The server behind a Redis URL and its version, e.g. `Valkey 8.1.1`. */
export function serverName(info: string): string {
  const { name, version } = serverIdentity(info);
  return `${name === 'valkey' ? 'Valkey' : 'Redis'} ${version || 'unknown'}`;
}

/** Deletes every Redis key of this run (ours and theirs), by prefix. */
export async function cleanRedis(redis: Redis, runId: string): Promise<number> {
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(
      cursor,
      'MATCH',
      `idempotency-bench-${runId}*`,
      'COUNT',
      1000,
    );
    cursor = next;
    if (keys.length > 0) {
      deleted += await redis.del(...keys);
    }
  } while (cursor !== '0');
  return deleted;
}
