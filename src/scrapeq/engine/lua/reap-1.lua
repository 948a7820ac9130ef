--[[
  Housekeeping without claiming: reap expired leases (an attempt spent, then retry or dead),
  promote due delayed jobs, wake due domains, drain retired domains' backlogs, forget domains
  idle for domain_ttl. Every claim already does this; this script lets an idle process or an admin command do it too.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (batch)
    ARGV[3]  JSON {seed, budget?}

  Output: {reaped, promoted, woken}
]]
--@include common
--@include domain
--@include jobs
--@include housekeeping

local refused = arg_refusal(function()
  if ARG.budget ~= nil then check_int(ARG.budget, 'budget', 1, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local budget = tonumber(ARG.budget) or CFG.batch
local reaped = reap_expired(budget)
local promoted = promote_due(budget)
local woken = wake_due(budget)
drain_retiring(budget)
forget_idle(budget)
return {reaped, promoted, woken}
