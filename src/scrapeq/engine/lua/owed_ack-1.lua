--[[
  Acknowledge owed results lines (includes/owed.lua): the worker's sink took them, so they
  leave the ledger. Idempotent: an id not owed (acknowledged already, or never owed) changes
  nothing.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {ids = [job id, ...]}  at most 1,000

  Output: how many of the ids were owed (and now are not).
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) when ids is not a list of at most
  1,000 non-empty strings, before anything is written.
]]
--@include common

local refused = arg_refusal(function()
  check_list(ARG.ids, 'ids', check_str)
  if #ARG.ids > 1000 then refuse('ids', 'at most 1000 ids', #ARG.ids) end
end)
if refused then return redis.error_reply(refused) end

if #ARG.ids == 0 then return 0 end
local gone = redis.call('HDEL', K.OWED, unpack(ARG.ids))
redis.call('ZREM', K.OWED_DUE, unpack(ARG.ids))
return gone
