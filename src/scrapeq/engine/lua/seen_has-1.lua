--[[
  Read only: whether the seen-set holds URLs (the URLFrontier service's GetURLStatus of a URL
  no job holds: a URL completed, dead, cancelled or purged, known but not due again).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (its seen-set layout)
    ARGV[3]  JSON {seen = [seen, ...]}  at most 100, each the seen-set argument of a URL of
             this partition (includes/seen.lua, as enqueue-1.lua's specs carry it)

  Output: {1 | 0, ...} per URL, in order: 1 when the seen-set has it. All 0 when the queue has
  no seen-set yet, or one of another layout (nothing is recorded: this script never writes).

  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument.

  Cost: what seen_has costs, a URL (includes/seen.lua).
]]
--@include common
--@include seen

local refused = arg_refusal(function()
  check_list(ARG.seen, 'seen', check_seen_arg)
  if #ARG.seen > 100 then refuse('seen', 'expected at most 100', #ARG.seen) end
end)
if refused then return redis.error_reply(refused) end
local out = {}
-- no layout recorded: no URL was seen (seen_has would record one: a write)
local recorded = redis.call('HGET', K.META, 'seen')
for i, seen in ipairs(ARG.seen) do
  out[i] = (recorded and seen_has(seen)) and 1 or 0
end
return out
