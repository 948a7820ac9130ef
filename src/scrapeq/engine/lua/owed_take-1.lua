--[[
  Take over owed results lines (includes/owed.lua) nobody acknowledged in time: those whose
  deadline passed (their worker died, or its sink keeps failing). Each one taken is given a
  new deadline, NOW + CFG.lease_ms, so two workers taking over at once do not both write it
  again and again: the taker writes it and acknowledges it (owed_ack-1.lua); a taker that dies
  too leaves it to be taken over once more.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (lease_ms)
    ARGV[3]  JSON {n}  the most lines to take, 1 to 1,000

  Output: {id, stored, id, stored, ...}, the most overdue first: stored is the ledger's
    '<record JSON>\n<answer>' (the attempt's record and the settle's answer). A deadline
    whose line is gone (never the case for this ledger's own writes) is dropped.
  Errors: 'SQ_BAD_ARG n: ...' (includes/check.lua) for n not an integer in [1, 1000], before
  anything is written.
]]
--@include common

local refused = arg_refusal(function()
  check_int(ARG.n, 'n', 1, 1000)
end)
if refused then return redis.error_reply(refused) end

local ids = redis.call('ZRANGEBYSCORE', K.OWED_DUE, '-inf', NOW, 'LIMIT', 0, ARG.n)
local out = {}
for _, id in ipairs(ids) do
  local stored = redis.call('HGET', K.OWED, id)
  if stored then
    redis.call('ZADD', K.OWED_DUE, NOW + CFG.lease_ms, id)
    out[#out + 1] = id
    out[#out + 1] = stored
  else
    redis.call('ZREM', K.OWED_DUE, id)
  end
end
return out
