--[[
  Extend the leases of claimed jobs.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (lease_ms)
    ARGV[3]  JSON {items = [{id, token}], lease_ms?}  lease_ms overrides the configured lease

  Output: one integer per item: 1 renewed, 0 stale (the token no longer owns the job).
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad item or a lease_ms past 100
  years, before any lease is renewed.
]]
--@include common

local refused = arg_refusal(function()
  check_list(ARG.items, 'items', function(it)
    check_table(it)
    check_str(it.id, 'id')
    check_num(it.token, 'token', 0, math.huge)
  end)
  if ARG.lease_ms ~= nil then check_ms(ARG.lease_ms, 'lease_ms') end
end)
if refused then return redis.error_reply(refused) end

local lease_ms = tonumber(ARG.lease_ms) or CFG.lease_ms
local out = {}
for i, it in ipairs(ARG.items) do
  out[i] = 0
  if redis.call('ZSCORE', K_INFLIGHT, it.id) then
    local raw = redis.call('GET', k_job(it.id))
    local ok, job = pcall(cjson.decode, raw or '')
    if ok then job = expand_job(job, it.id) end
    if ok and type(job) == 'table' and job.token == it.token then
      redis.call('ZADD', K_INFLIGHT, NOW + lease_ms, it.id)
      out[i] = 1
    end
  end
end
return out
