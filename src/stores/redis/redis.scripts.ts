import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/** A client of the store: a single server (or Sentinel) or a Cluster. */
export type RedisClient = Redis | Cluster;

/** @internal A Lua script, sent by its SHA1 once Redis has it. */
export interface RedisScript {
  readonly name: string;
  readonly lua: string;
  readonly sha: string;
}

function script(name: string, lua: string): RedisScript {
  return { name, lua, sha: createHash('sha1').update(lua).digest('hex') };
}

// The server's clock, in ms: every timestamp of a record is the server's,
// whichever instance wrote it.
const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`;
// The claim's owner holds the record: every write of a claim is fenced by it.
const OWNED = `local r = redis.call('HMGET', KEYS[1], 'st', 'owner', 'waiting', 'exp')
local owned = r[1] == 'in_progress' and r[2] == ARGV[1]
`;

/**
 * @internal Claims a key (KEYS[1]: the record). ARGV: owner, fingerprint,
 * method, path, lease ms, ttl ms, wait ('1'). Takes over a record that is
 * finished and past its own expiry, or in progress with its lease run out,
 * whatever Redis's own expiry of the key says; otherwise returns it, marking
 * it waited for when a duplicate of the same request waits. A claim that
 * the owner already holds is granted again: ioredis sends a command again
 * after a reconnection when its reply was lost, and the first one may have
 * run.
 * Returns {1}, {0, 'in_progress', fingerprint, lease ms left} or
 * {0, status, fingerprint, response status, headers JSON, body}.
 */
export const CLAIM = script(
  'claim',
  `${NOW}local r = redis.call('HMGET', KEYS[1], 'st', 'lease', 'exp', 'fp', 'waiting', 'rs', 'rh', 'rb', 'owner')
local st = r[1]
local free = not st
  or (st == 'in_progress' and (tonumber(r[2]) or 0) <= now)
  or (st ~= 'in_progress' and (tonumber(r[3]) or 0) <= now)
if free then
  local lease = tonumber(ARGV[5])
  local exp = now + math.max(lease, tonumber(ARGV[6]))
  if st then
    redis.call('DEL', KEYS[1])
  end
  redis.call('HSET', KEYS[1], 'st', 'in_progress', 'owner', ARGV[1], 'fp', ARGV[2],
    'method', ARGV[3], 'path', ARGV[4], 'lease', now + lease, 'exp', exp,
    'created', now)
  redis.call('PEXPIREAT', KEYS[1], exp)
  return {1}
end
if st == 'in_progress' then
  if r[9] == ARGV[1] then
    return {1}
  end
  if ARGV[7] == '1' and r[4] == ARGV[2] and r[5] ~= '1' then
    redis.call('HSET', KEYS[1], 'waiting', '1')
  end
  return {0, st, r[4] or '', math.max(0, (tonumber(r[2]) or 0) - now)}
end
return {0, st, r[4] or '', r[6] or '0', r[7] or '', r[8] or ''}`,
);

/**
 * @internal Completes a claim, fenced by its owner (KEYS[1]: the record,
 * KEYS[2]: its steps). ARGV: owner, status, response status, headers JSON,
 * body, ttl ms, replayable ('1'). Clears the key's steps.
 * Returns {completed, waiting}.
 */
export const COMPLETE = script(
  'complete',
  `${OWNED}if not owned then return {0, 0} end
${NOW}local exp = now + tonumber(ARGV[6])
redis.call('HDEL', KEYS[1], 'lease')
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[1], 'st', ARGV[2], 'rs', ARGV[3], 'exp', exp, 'completed', now,
    'rh', ARGV[4], 'rb', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'st', ARGV[2], 'rs', ARGV[3], 'exp', exp, 'completed', now)
end
redis.call('DEL', KEYS[2])
redis.call('PEXPIREAT', KEYS[1], exp)
return {1, r[3] == '1' and 1 or 0}`,
);

/**
 * @internal Gives a claim up, fenced by its owner (KEYS[1]: the record).
 * ARGV: owner. The key's steps stay for the next attempt.
 * Returns {released, waiting}.
 */
export const RELEASE = script(
  'release',
  `${OWNED}if not owned then return {0, 0} end
redis.call('DEL', KEYS[1])
return {1, r[3] == '1' and 1 or 0}`,
);

/**
 * @internal Renews a lease, fenced by its owner (KEYS[1]: the record).
 * ARGV: owner, duration ms. Redis keeps the key until the later of the
 * record's expiry and the lease's. Returns 1 when renewed.
 */
export const RENEW = script(
  'renew',
  `${OWNED}if not owned then return 0 end
${NOW}local lease = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease', lease)
redis.call('PEXPIREAT', KEYS[1], math.max(tonumber(r[4]) or 0, lease))
return 1`,
);

/**
 * @internal Saves a step's result, fenced by the claim's owner (KEYS[1]:
 * the record, KEYS[2]: its steps). ARGV: owner, field, value, identity
 * (JSON of scope and key), ms Redis keeps the steps at least.
 * Returns 1 when saved.
 */
export const SAVE_STEP = script(
  'saveStep',
  `${OWNED}if not owned then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3], 'id', ARGV[4])
local keep = tonumber(ARGV[5])
if redis.call('PTTL', KEYS[2]) < keep then
  redis.call('PEXPIRE', KEYS[2], keep)
end
return 1`,
);

/**
 * @internal Reads a step's stored value, fenced by the claim's owner
 * (KEYS[1]: the record, KEYS[2]: its steps). ARGV: owner, field.
 */
export const READ_STEP = script(
  'readStep',
  `${OWNED}if not owned then return false end
return redis.call('HGET', KEYS[2], ARGV[2])`,
);

/**
 * @internal Deletes collected steps (KEYS[1]: the steps), each only if its
 * value is still the one collected (a step saved again since stays).
 * ARGV: field, value, field, value... Returns how many it deleted.
 */
export const DROP_STEPS = script(
  'dropSteps',
  `local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
if redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
end
return n`,
);

/**
 * @internal Removes entries of the index of steps (KEYS[1]) whose score is
 * still the one collected (a step saved again since has another).
 * ARGV: member, score, member, score...
 */
export const UNINDEX = script(
  'unindex',
  `for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return 0`,
);

type Argument = string | Buffer | number;

/**
 * The script commands of an ioredis client, replying in strings or (the
 * `…Buffer` variants) in Buffers. Not callBuffer('evalsha', …): with
 * enableAutoPipelining, ioredis cannot pipeline a command sent by call().
 * ioredis has Buffer variants of every command, but its types omit these.
 */
interface ScriptCommands {
  evalsha(sha: string, keys: number, ...rest: Argument[]): Promise<unknown>;
  eval(lua: string, keys: number, ...rest: Argument[]): Promise<unknown>;
  evalshaBuffer(
    sha: string,
    keys: number,
    ...rest: Argument[]
  ): Promise<unknown>;
  evalBuffer(lua: string, keys: number, ...rest: Argument[]): Promise<unknown>;
}

function missing(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * @internal Runs a script in one round trip: EVALSHA, or EVAL (which loads
 * it again) when the server has lost it (restarted, failed over, or SCRIPT
 * FLUSH).
 */
export function runScript<T>(
  client: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
): Promise<T> {
  return run<T>(client, script, keys, args, false);
}

/** @internal {@link runScript} with the bulk strings of its reply as Buffers. */
export function runScriptBuffer<T>(
  client: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
): Promise<T> {
  return run<T>(client, script, keys, args, true);
}

async function run<T>(
  client: RedisClient,
  { lua, sha }: RedisScript,
  keys: readonly string[],
  args: readonly Argument[],
  buffers: boolean,
): Promise<T> {
  const commands = client as unknown as ScriptCommands;
  try {
    return (await (buffers
      ? commands.evalshaBuffer(sha, keys.length, ...keys, ...args)
      : commands.evalsha(sha, keys.length, ...keys, ...args))) as T;
  } catch (error) {
    if (!missing(error)) {
      throw error;
    }
    return (await (buffers
      ? commands.evalBuffer(lua, keys.length, ...keys, ...args)
      : commands.eval(lua, keys.length, ...keys, ...args))) as T;
  }
}
