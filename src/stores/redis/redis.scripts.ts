import { createHash } from 'node:crypto';

/** @internal A Lua script, sent by its SHA1 once Redis has it. */
export interface RedisScript {
  readonly name: string;
  readonly lua: string;
  readonly sha: string;
}

/** @internal A script, with its SHA1. */
export function script(name: string, lua: string): RedisScript {
  return { name, lua, sha: createHash('sha1').update(lua).digest('hex') };
}

// The claim's owner (ARGV[1]) holds the record (see redis-record.ts): every
// write of a claim is fenced by it. 105 is 'i' (in progress), 98 'b' (in
// progress or released, bound to its request), 119 'w' (a duplicate
// waits). A claim that is not bound is checked as before, with no more
// work; a bound one holds while its lease, in its value, has not
// ended by Redis's clock (TIME: Redis 7 and Valkey replicate a script by
// its effects). For a bound value, sets `now`, `lease` and `bind` (lease
// and binding ends, ms) and `at` (where its owner begins); `now` stays nil
// for any other.
const OWNED = `local v = redis.call('GET', KEYS[1])
local owned = v and string.byte(v, 1) == 105 and string.sub(v, 4, 4 + #ARGV[1]) == ARGV[1] .. '\\n'
local now, lease, bind, at
if v and not owned and string.byte(v, 1) == 98 then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  local l, b
  l, b, at = string.match(v, '^b. (%d+) (%d+) ()')
  lease, bind = tonumber(l), tonumber(b)
  owned = lease > now and string.sub(v, at, at + #ARGV[1]) == ARGV[1] .. '\\n'
end
`;
const WAITING = `(string.byte(v, 2) == 119 and 1 or 0)`;
// After OWNED, for a claim that is not bound (`now` nil): `now`, and its
// lease and binding ends as a bound value holds them (its lease its key's
// PX, its binding over), and `at` where its owner begins.
const TIMES = `if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  lease, bind, at = now + math.max(redis.call('PTTL', KEYS[1]), 0), now, 4
end
`;

// A key's generation (`ClaimOutcome.generation`, which the module derives
// the keys of downstream calls from) is a key of its own beside the record,
// in its hash slot, not a part of the record: a claim's record expires with
// its lease (its PX), and the generation must outlive that lease, so that
// the claim that takes over after a crash derives the same keys, until the
// key expires (`max(ttl, lease)` after its last claim). Moving the lease
// into the value instead, as a bound claim has it, would keep the record
// for the ttl, but the plain `SET NX` of a claim cannot read Redis's clock:
// every claim would be a script.
// The plain path sends `SET <generation> <owner> NX PX <keep>` in the
// write of its `SET NX` of the record, before it: a claim that wrote both
// started the generation (its owner token, never another claim's); one
// that found a generation (the record had gone with the lease of a claim
// whose instance died) is granted by the claim script, which reads it and
// keeps it `keep` more. Sent with a replay or a refused claim, that
// `SET NX` writes nothing while the key has a generation, as it has while
// its record is a claim (bound or not: a binding keeps it as long as the
// record) and mostly while it is finished; where it writes one, no claim has had it: the first claim that
// finds it starts it. A generation never outlives a finished record (see
// COMPLETE), so that the key starts a new one once the record expired.
// Sent first: a claim that a failover kept (a replica had received the
// beginning of the write) has its generation.
/**
 * @internal Claims a key (KEYS[1]: the record, KEYS[2]: its generation)
 * when the plain `SET NX` of the store found it held, or found its
 * generation. ARGV: owner, the claim's value, lease ms, wait ('1'), the
 * fingerprint's line, the instance's clock (ms), ms the generation is kept
 * (the claim's ttl, at least its lease). Takes over a finished record past
 * its own expiry, whatever Redis's own expiry of the key says; a claim's
 * lease is its key's `PX`. Otherwise returns the record, marking a claim
 * waited for when a duplicate of the same request waits. A claim that the
 * owner already holds is granted again: ioredis sends a command again
 * after a reconnection when its reply was lost, and the first one may have
 * run. A lease of 0 ms is over at once: the claim is granted, and nothing
 * holds the key.
 * A key bound to its request (a `b` value: a step, `bind()`, a release
 * that binds it) whose lease ended (released, or not renewed) is taken
 * over by a claim of the same fingerprint only, bound still, now until
 * the key expires at the earliest (its lease in its value, its key kept
 * until the later of lease and binding ends); a claim of another one gets
 * the value, with no lease left, until the binding ends; then the key is
 * free for any request.
 * A claim granted keeps the key's generation, or starts one (the owner
 * token) where the key has none or its record was finished; the
 * generation is kept for its ms from now, and as long as the record.
 * Returns {1, generation}, {0, record, lease ms left} (in progress) or
 * {0, record}.
 */
export const CLAIM = script(
  'claim',
  `${OWNED}local function granted(fresh)
  local g = not fresh and redis.call('GET', KEYS[2]) or ARGV[1]
  local keep = math.max(tonumber(ARGV[7]), redis.call('PTTL', KEYS[1]))
  if keep > 0 then
    redis.call('SET', KEYS[2], g, 'PX', keep)
  else
    redis.call('DEL', KEYS[2])
  end
  return {1, g}
end
if owned then
  return granted(false)
end
if v then
  local first = string.byte(v, 1)
  if first == 105 or (now and lease > now) then
    if ARGV[4] == '1' and string.byte(v, 2) ~= 119 then
      local a = string.find(v, '\\n', 1, true)
      local b = string.find(v, '\\n', a + 1, true)
      if string.sub(v, a + 1, b - 1) == ARGV[5] then
        redis.call('SET', KEYS[1], string.char(first) .. 'w' .. string.sub(v, 3), 'KEEPTTL')
      end
    end
    return {0, v, now and lease - now or redis.call('PTTL', KEYS[1])}
  end
  if now then
    if bind > now then
      local a = string.find(v, '\\n', at, true)
      local b = string.find(v, '\\n', a + 1, true)
      if string.sub(v, a + 1, b - 1) ~= ARGV[5] then
        return {0, v, 0}
      end
      local ends = now + tonumber(ARGV[3])
      bind = math.max(bind, now + tonumber(ARGV[7]))
      redis.call('SET', KEYS[1], 'b- ' .. ends .. ' ' .. bind .. ' ' .. string.sub(ARGV[2], 4), 'PX', math.max(ends, bind) - now)
      return granted(false)
    end
  elseif (tonumber(string.match(v, '^%a (%d+)')) or 0) > tonumber(ARGV[6]) then
    return {0, v}
  end
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
elseif v then
  redis.call('DEL', KEYS[1])
end
return granted(v and not now)`,
);

/**
 * @internal Completes a claim, fenced by its owner (KEYS[1]: the record,
 * KEYS[2]: its steps, KEYS[3]: its generation), and clears the key's steps.
 * ARGV: owner, the finished record, ttl ms (0: the record goes at once).
 * The generation stays if it expires no later than the record (as a claim's
 * `SET NX` of it then writes nothing while the record is replayed), and
 * goes otherwise: once the record expired, the key starts a new one. Its
 * time to live is read before the record is written, so that it ends
 * before the record's by Redis's clock. Given two more ARGV (headers
 * JSON, body), the record's second is only its first line (status letter,
 * expiry, response status, completion time), and the script adds the
 * claim's fingerprint and request line (without the claim's time, which a
 * finished record does not hold), then those: for a caller that has no claim request to
 * build the record whole from (the module builds it whole when it can:
 * copying the lines in Lua costs Redis more a call; figures in
 * test/bench/README.md). Returns {completed, waiting}.
 */
export const COMPLETE = script(
  'complete',
  `${OWNED}if not owned then return {0, 0} end
local g = redis.call('PTTL', KEYS[3])
if g == -1 or g > tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[3])
end
if ARGV[3] == '0' then
  redis.call('DEL', KEYS[1])
else
  local value = ARGV[2]
  if #ARGV > 3 then
    local a = string.find(v, '\\n', 1, true)
    value = value .. (string.gsub(string.sub(v, a), ',%d+%]$', ']')) .. '\\n' .. ARGV[4] .. '\\n' .. ARGV[5]
  end
  redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
end
redis.call('DEL', KEYS[2])
return {1, ${WAITING}}`,
);

/**
 * @internal Gives a claim up, fenced by its owner (KEYS[1]: the record,
 * KEYS[2]: its generation). ARGV: owner, whether to bind the key to the
 * claim's request ('1': the attempt derived keys), as BIND does. The key's
 * steps stay for the next attempt. A key bound to its request stays so,
 * ownerless, until its binding ends: only the same request claims it
 * again, in the same generation. Any other goes at once, with its
 * generation.
 * Returns {released, waiting}.
 */
export const RELEASE = script(
  'release',
  `${OWNED}if not owned then return {0, 0} end
if ARGV[2] == '1' then
${TIMES}  bind = math.max(bind, now + redis.call('PTTL', KEYS[2]))
end
if now and bind > now then
  redis.call('SET', KEYS[1], 'b- 0 ' .. bind .. ' ' .. string.sub(v, (string.find(v, '\\n', at, true))), 'PX', bind - now)
  redis.call('PEXPIRE', KEYS[2], bind - now, 'GT')
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
return {1, ${WAITING}}`,
);

/**
 * @internal Binds a claim's key to its request, fenced by its owner
 * (KEYS[1]: the record, KEYS[2]: its generation): the record becomes (or
 * stays) a `b` value, its lease moved from its key's `PX` into it, bound
 * until the key's generation ends (the key's expiry: a binding that
 * outlived it would refuse other requests past it), or the hold's end if
 * later (the generation then kept as long), or later where a step binds it
 * longer. ARGV: owner, the hold in ms (how long from now the key stays
 * bound at least; '0': none). Returns 1 when bound.
 */
export const BIND = script(
  'bind',
  `${OWNED}if not owned then return 0 end
${TIMES}local g = redis.call('PTTL', KEYS[2])
local hold = tonumber(ARGV[2])
if g > 0 and hold > g then
  redis.call('PEXPIRE', KEYS[2], hold)
  g = hold
end
local ends = now + g
if ends > bind then
  redis.call('SET', KEYS[1], 'b' .. string.sub(v, 2, 2) .. ' ' .. lease .. ' ' .. ends .. ' ' .. string.sub(v, at), 'PX', math.max(lease, ends) - now)
end
return 1`,
);

/**
 * @internal Renews a lease, fenced by its owner (KEYS[1]: the record,
 * KEYS[2]: its generation, kept at least as long as the lease, so that a
 * step bound late in a long attempt binds the attempt's generation).
 * ARGV: owner, duration ms: the key's `PX`, which the lease is (0: the lease
 * ends now), or, for a claim bound by a step, the lease's end in its value
 * (its key kept until the later of lease and binding ends).
 * Returns 1 when renewed.
 */
export const RENEW = script(
  'renew',
  `${OWNED}if not owned then return 0 end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT')
end
if now then
  local ends = now + tonumber(ARGV[2])
  local last = math.max(ends, bind)
  if last > now then
    redis.call('SET', KEYS[1], string.sub(v, 1, 3) .. ends .. ' ' .. bind .. ' ' .. string.sub(v, at), 'PX', last - now)
  else
    redis.call('DEL', KEYS[1])
  end
elseif tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1`,
);

/**
 * @internal Saves a step's result, fenced by the claim's owner (KEYS[1]:
 * the record, KEYS[2]: its steps, KEYS[3]: its generation), and binds the
 * key to the claim's request until the step expires (by Redis's clock):
 * the record becomes (or stays) a `b` value, its lease moved from its
 * key's `PX` into it, and the key's generation is kept as long as it.
 * ARGV: owner, field, value, identity (JSON of scope and key), ms Redis
 * keeps the steps at least, the step's ttl ms, the fingerprint's line of
 * the lease, which must be the claim's (else nothing is saved).
 * Returns 1 when saved.
 */
export const SAVE_STEP = script(
  'saveStep',
  `${OWNED}if not owned then return 0 end
local a = string.find(v, '\\n', at or 1, true)
local b = string.find(v, '\\n', a + 1, true)
if string.sub(v, a + 1, b - 1) ~= ARGV[7] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3], 'id', ARGV[4])
local keep = tonumber(ARGV[5])
if redis.call('PTTL', KEYS[2]) < keep then
  redis.call('PEXPIRE', KEYS[2], keep)
end
${TIMES}local ends = now + tonumber(ARGV[6])
if ends > bind then
  local life = math.max(lease, ends) - now
  redis.call('SET', KEYS[1], 'b' .. string.sub(v, 2, 2) .. ' ' .. lease .. ' ' .. ends .. ' ' .. string.sub(v, at), 'PX', life)
  redis.call('PEXPIRE', KEYS[3], life, 'GT')
end
return 1`,
);

/**
 * @internal Reads a step's stored value, fenced by the claim's owner
 * (KEYS[1]: the record, KEYS[2]: its steps). ARGV: owner, field. The
 * caller checks the step's fingerprint and expiry.
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
 * @internal Lets a key's steps go to other collectors (KEYS[1]: the key's
 * `collecting` lease), if this collection (ARGV[1], its token) still holds
 * them.
 */
export const RELEASE_COLLECTING = script(
  'releaseCollecting',
  `if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0`,
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
