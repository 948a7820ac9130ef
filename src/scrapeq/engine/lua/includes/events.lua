--[[
  The queue's event stream (sq:{Q}:events, capped) and its counters (sq:{Q}:stats).
]]
--@include keys
local EVENTS_MAXLEN = 10000  --@once

-- Append an event to the capped stream: kind, domain, message and at (ms), then `extra`, a
-- list of more field/value pairs some kinds carry (retired: jobs). Readers that know only the
-- first four fields read every event as before.
local function emit(kind, domain, message, extra)
  if extra then
    redis.call('XADD', K.EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*',
      'kind', kind, 'domain', domain or '', 'message', message or '', 'at', NOW, unpack(extra))
    return
  end
  redis.call('XADD', K.EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*',
    'kind', kind, 'domain', domain or '', 'message', message or '', 'at', NOW)
end

local function stat(field, by)
  redis.call('HINCRBY', K.STATS, field, by or 1)
end
