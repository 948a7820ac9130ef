--[[
  Extend the leases of claimed jobs, or record that their handlers run.

  An item with `h` renews nothing: it records in the claimed job (field `hr` = its token)
  that the job's handler runs now, alone in its worker process, or overran max_job_time
  there. If that lease expires, the worker died (or stalled) in this job's handler: the reap
  spends the attempt (housekeeping.lua, reap_expired). A lease that expires unmarked gives
  its attempt back, within a budget.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (lease_ms)
    ARGV[3]  JSON {items = [{id, token, h?}], lease_ms?}  lease_ms overrides the configured
             lease; h = true: mark the handler running instead of renewing

  Output: one integer per item: 1 renewed (or marked), 0 stale (the token no longer owns
  the job).
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad item or a lease_ms past 100
  years, before any lease is renewed.
]]
--@include common

local refused = arg_refusal(function()
  check_list(ARG.items, 'items', function(it)
    check_table(it)
    check_str(it.id, 'id')
    check_num(it.token, 'token', 0, math.huge)
    if it.h ~= nil then check_bool(it.h, 'h') end
  end)
  if ARG.lease_ms ~= nil then check_ms(ARG.lease_ms, 'lease_ms') end
end)
if refused then return redis.error_reply(refused) end

local lease_ms = tonumber(ARG.lease_ms) or CFG.lease_ms
local out = {}
for i, it in ipairs(ARG.items) do
  out[i] = 0
  if redis.call('ZSCORE', K.INFLIGHT, it.id) then
    local raw = redis.call('GET', k_job(it.id))
    local ok, job = pcall(cjson.decode, raw or '')
    if ok then job = expand_job(job, it.id) end
    if ok and type(job) == 'table' and job.token == it.token then
      if it.h then
        job.hr = job.token
        save_claimed(job)
      else
        redis.call('ZADD', K.INFLIGHT, NOW + lease_ms, it.id)
      end
      out[i] = 1
    end
  end
end
return out
