import { script } from './redis.scripts.js';

// The operator's scripts (see redis-admin.ts). Each touches the keys of
// one (scope, key), in one hash slot. 105 is 'i' (a claim), 98 'b' (a
// claim bound to its request, or released so), as in redis.scripts.ts.
const NOW = `local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
`;

/**
 * @internal Reads a record for the operator (KEYS[1]: the record, KEYS[2]:
 * its generation, KEYS[3]: its steps). ARGV: 'list' (the value's first
 * three lines alone, no steps) or 'inspect' (the value whole, and the
 * steps). Returns {value, its PTTL, generation, its PTTL, Redis's clock
 * (ms), steps (HGETALL)}, '' for a key that does not exist.
 */
export const READ_RECORD = script(
  'readRecord',
  `${NOW}local v = redis.call('GET', KEYS[1])
if not v then return {''} end
local steps = {}
if ARGV[1] == 'list' then
  local a = string.find(v, '\\n', 1, true)
  local b = a and string.find(v, '\\n', a + 1, true)
  local c = b and string.find(v, '\\n', b + 1, true)
  if c then v = string.sub(v, 1, c - 1) end
else
  steps = redis.call('HGETALL', KEYS[3])
end
return {v, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '', redis.call('PTTL', KEYS[2]), now, steps}`,
);

/**
 * @internal Ends a record so that the next request runs (KEYS[1]: the
 * record, KEYS[2]: its steps, KEYS[3]: its generation). ARGV: '1' to end a
 * claim whose lease is live. A claim bound to its request whose binding
 * lasts is released as RELEASE releases it: ownerless, its lease over, its
 * steps and generation kept, so that only the same request takes it over
 * (and resumes); a claim held by an owner goes with its steps but keeps
 * its generation, as a takeover does (its attempt may have derived keys
 * from it); any other record goes with its steps and generation.
 * Either way the owner's fenced writes find no claim of theirs. Returns
 * {0} (no record), {2, owner, lease ms left} (held) or {1, whether a claim
 * was taken from its owner}.
 */
export const RESET_RECORD = script(
  'resetRecord',
  `${NOW}local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local first = string.byte(v, 1)
local owner, left, bind, nl
if first == 105 then
  nl = string.find(v, '\\n', 1, true)
  owner = string.sub(v, 4, nl - 1)
  left = math.max(redis.call('PTTL', KEYS[1]), 0)
elseif first == 98 then
  local l, b, at = string.match(v, '^b. (%d+) (%d+) ()')
  nl = string.find(v, '\\n', at, true)
  owner = string.sub(v, at, nl - 1)
  left = math.max(tonumber(l) - now, 0)
  bind = tonumber(b)
end
local claimed = owner ~= nil and owner ~= ''
if claimed and left > 0 and ARGV[1] ~= '1' then
  return {2, owner, left}
end
if bind and bind > now then
  redis.call('SET', KEYS[1], 'b- 0 ' .. bind .. ' ' .. string.sub(v, nl), 'PX', bind - now)
elseif claimed then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
end
return {1, claimed and 1 or 0}`,
);

/**
 * @internal What a forget needs to know of a key (KEYS[1]: the record,
 * KEYS[2]: its steps, KEYS[3]: the identity of its count of failures):
 * {the record's request line ('' without a record), the identity of its
 * steps, or else of its count ('' without either), the steps hash's length}.
 */
export const PEEK_RECORD = script(
  'peekRecord',
  `local v = redis.call('GET', KEYS[1])
local line = ''
if v then
  local a = string.find(v, '\\n', 1, true)
  local b = a and string.find(v, '\\n', a + 1, true)
  if b then
    local c = string.find(v, '\\n', b + 1, true)
    line = string.sub(v, b + 1, c and c - 1 or -1)
  end
end
local identity = redis.call('HGET', KEYS[2], 'id') or redis.call('GET', KEYS[3]) or ''
return {line, identity, redis.call('HLEN', KEYS[2])}`,
);

/**
 * @internal Forgets a key (KEYS[1]: the record, KEYS[2]: its steps,
 * KEYS[3]: its generation, KEYS[4]: its count of failures, KEYS[5]: that
 * count's identity), deleting at
 * most ARGV[1] rows: the record first (with its generation and failures:
 * its count of failures: its owner is fenced out), then its steps; steps beyond that stay for the
 * next batch. Returns {records, steps, steps left}.
 */
export const FORGET_RECORD = script(
  'forgetRecord',
  `local budget = tonumber(ARGV[1])
local records = 0
if budget > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[1])
  records = 1
  budget = budget - 1
end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
local steps, left = 0, 0
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  if string.sub(f, 1, 2) == 's:' then
    if steps < budget then
      redis.call('HDEL', KEYS[2], f)
      steps = steps + 1
    else
      left = left + 1
    end
  end
end
if left == 0 then redis.call('DEL', KEYS[2]) end
return {records, steps, left}`,
);
