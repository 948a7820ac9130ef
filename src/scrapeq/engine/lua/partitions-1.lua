--[[
  Record or check how many partitions a queue has (`partitions` setting).

  KEYS[1] is the queue's own prefix sq:{Q}: (its home, partitioned or not).

  ARG:
    parts   the number of partitions the caller's settings say

  The number lives in sq:{Q}:meta, field `parts`; absent means 1 (the layout every queue had
  before partitions, whose keys are sq:{Q}:*). A caller with parts > 1 records it when none
  is stored and the queue has no domain yet (sq:{Q}:dcount absent or 0: nothing was ever
  enqueued under one partition; the client migrates the home first, migrate-1.lua, so an
  older queue's domains are counted there). Anything else that differs from the stored number (or from
  1 when none is stored and the single-partition queue is in use) is refused, before any
  write: `SQ_PARTITIONS <stored> <given>`. A cleared queue (`scrapeq queue clear`) loses the
  field with its meta key, so its partitions may change.

  Output: 'ok'.
]]
--@include common

local MAX_PARTS = 1024  -- the partitions setting's bound (scrapeq/engine/config/settings.py)
local refused = arg_refusal(function() check_int(ARG.parts, 'parts', 1, MAX_PARTS) end)
if refused then return redis.error_reply(refused) end

local given = tonumber(ARG.parts) or 1
local stored = tonumber(redis.call('HGET', K.META, 'parts'))
if stored == nil then
  if given == 1 then return 'ok' end
  if (tonumber(redis.call('GET', K.DCOUNT)) or 0) > 0 then
    return redis.error_reply('SQ_PARTITIONS 1 ' .. given)
  end
  redis.call('HSET', K.META, 'parts', given)
  return 'ok'
end
if stored ~= given then
  return redis.error_reply('SQ_PARTITIONS ' .. stored .. ' ' .. given)
end
return 'ok'
