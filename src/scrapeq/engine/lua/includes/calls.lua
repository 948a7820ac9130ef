--[[
  redis.call with a long variadic argument list, sent in slices.
]]
-- redis.call(cmd, [key,] args...) with the variadic `args` (a list) sent in slices of at most
-- 1000 (an even number, so score/member and key/value pairs stay whole): Lua's unpack has a
-- stack limit. Returns the table replies concatenated (MGET, HMGET).
local function call_many(cmd, key, args)
  local n = #args
  if n <= 1000 then
    if key then return redis.call(cmd, key, unpack(args)) end
    return redis.call(cmd, unpack(args))
  end
  local out = {}
  for i = 1, n, 1000 do
    local j = math.min(i + 999, n)
    local reply
    if key then
      reply = redis.call(cmd, key, unpack(args, i, j))
    else
      reply = redis.call(cmd, unpack(args, i, j))
    end
    if type(reply) == 'table' then
      for k = 1, j - i + 1 do out[#out + 1] = reply[k] end
    end
  end
  return out
end

-- A sorted set of at most 128 members (Redis's zset-max-listpack-entries), none longer than
-- 64 bytes (zset-max-listpack-value), is a list: ZADD, ZREM and ZSCORE find a member by
-- walking it, up to 128 entries a member, where a larger set (a skiplist) finds it by its
-- hash. A longer member makes the set a skiplist, which it stays until it is emptied.
-- SKIPLIST_MARK is one, added and removed within one call: no reader sees it (no job id or
-- domain holds a space). The sets a call writes a member at a time, many times a call, are
-- made skiplists: the inflight set (a claim's leases in, a settle's out: claim-1.lua), the
-- ready domains (a claim's visits) and the active ones (breaker.lua). BENCHMARKS section 42.
local SKIPLIST_MARK =  --@once
  '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ skiplist'

-- The sorted set `key` made a skiplist when it is a list (SKIPLIST_MARK), with `member` at
-- `score` added (nil: none; a missing key then stays missing).
local function as_skiplist(key, score, member)
  if member then
    redis.call('ZADD', key, '+inf', SKIPLIST_MARK, score, member)
  else
    redis.call('ZADD', key, '+inf', SKIPLIST_MARK)
  end
  redis.call('ZREM', key, SKIPLIST_MARK)
end

-- A number as redis.call sends it ('%.17g', Redis 6.2's scripting.c), formatted once per
-- call and value: NOW, a lease deadline or a count of 1 goes out as text many times a call,
-- and each formatting of a number is a libc printf (about 2,500 instructions). Integers only
-- (ms, counts): for those every Redis version sends the same digits.
local NUMTEXT = {memo = {}}

function NUMTEXT.of(x)
  local text = NUMTEXT.memo[x]
  if not text then
    text = string.format('%.17g', x)
    NUMTEXT.memo[x] = text
  end
  return text
end
