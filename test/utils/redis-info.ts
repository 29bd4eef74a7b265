/** A server that speaks the Redis protocol, as its INFO names it. */
export interface ServerIdentity {
  /** Its `server_name` (Redis 7 has none: `redis`). */
  readonly name: string;
  /** That server's version (Valkey's `redis_version` is the Redis it is compatible with). */
  readonly version: string;
}

/** What the server says it is, from the text of its `INFO server`. */
export function serverIdentity(info: string): ServerIdentity {
  const field = (key: string) =>
    new RegExp(`^${key}:(.*?)\\r?$`, 'm').exec(info)?.[1];
  const name = field('server_name') ?? 'redis';
  return { name, version: field(`${name}_version`) ?? '' };
}
