import { plainTransport, type MessageTransport } from './message-transport.js';

/**
 * @internal Redis pub/sub (`RedisContext`): the channel; no headers, so the
 * key is in the data (or the `key` option's).
 */
export function redisTransport(context: unknown): MessageTransport | undefined {
  const redis = context as { getChannel?: unknown };
  return typeof redis.getChannel === 'function'
    ? plainTransport((redis as { getChannel(): unknown }).getChannel())
    : undefined;
}
