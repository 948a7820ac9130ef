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
