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
-- SKIPLIST.mark is one, added and removed within one call: no reader sees it (no job id or
-- domain holds a space). The sets a call writes a member at a time, many times a call, are
-- made skiplists: the inflight set (a claim's leases in, a settle's out: claim-1.lua), the
-- ready domains (a claim's visits) and the active ones (breaker.lua), by calls that write
-- SKIPLIST.from of their members or more (a call of a few jobs walks a list for less than
-- the mark costs). ADR 0062, BENCHMARKS section 42.
local SKIPLIST = {from = 8,  --@once
  mark = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ skiplist'}

-- ZADD to the sorted set `key` of `args` (score, member pairs; none: nothing is added), by a
-- call that writes `n` of its members: from SKIPLIST.from on, the set is made a skiplist when
-- it is a list (SKIPLIST.mark, first: a set this ZADD creates is a skiplist from the start).
local function zadd_skiplist(key, n, args)
  if n >= SKIPLIST.from then
    table.insert(args, 1, SKIPLIST.mark)
    table.insert(args, 1, '+inf')
    call_many('ZADD', key, args)
    redis.call('ZREM', key, SKIPLIST.mark)
  elseif #args > 0 then
    call_many('ZADD', key, args)
  end
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
