--[[
  Numbers that never repeat (fencing tokens, job ids) and the time a job id was issued at.
]]
--@include keys
-- Numbers that must never repeat (fencing tokens, job ids) are the larger of the stored
-- counter and a floor from the server clock: `per_ms` numbers per millisecond since
-- 2026-01-01. A Redis that lost its last writes (AOF cut back, a failover to a replica that
-- lagged) restarts with an older counter, but its clock has moved on, so the floor is past
-- every number issued before the loss unless they were issued faster than `per_ms` on average.
-- Kept below 1e14: cjson and redis.call write numbers with 14 significant digits.
local NUMBERS_EPOCH_MS = 1767225600000  --@once

-- Reserve `n` fresh numbers of counter `field` in sq:{Q}:meta; returns the first.
local function fresh_numbers(field, n, per_ms)
  local stored = tonumber(redis.call('HGET', K.META, field)) or 0
  local floor = math.max(NOW - NUMBERS_EPOCH_MS, 0) * per_ms
  local first = math.max(stored, floor) + 1
  redis.call('HSET', K.META, field, string.format('%.0f', first + n - 1))
  return first
end


-- The server time (ms) a job id was issued at, from its number (fresh_numbers: 1,000 a ms
-- from NUMBERS_EPOCH_MS); nil for an id of another form.
local function id_ms(id)
  if type(id) ~= 'string' or not string.find(id, '^%l%x+$') or #id > 14 then return nil end
  return math.floor(tonumber(string.sub(id, 2), 16) / 1000) + NUMBERS_EPOCH_MS
end
