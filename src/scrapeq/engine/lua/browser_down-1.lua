--[[
  A worker's browsers benched, or back (issue 42): the `browsers_down` alarm of `status`.

  A worker process whose chromium keeps crashing (or will not start) benches its browser
  pool for a backoff (runtime/browser_pool.py), then probes it with one launch; while benched
  its browser jobs are given back and wait. It says so here, so that `status`, its `--json`
  and the progress line raise the alarm the way `exits_down` does; and says here when a
  probe's page was rendered (no wait_ms: its entry removed).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {worker, wait_ms?, failures?, reason?}
      worker    the worker process (host:pid:random)
      wait_ms   ms until its pool may probe with one launch; absent: usable again
      failures  crashes and failed launches in a row
      reason    the last one's text (at most 300 characters are kept)

  Keys: <prefix>browsers:down (hash: worker -> JSON {until, failures, reason}). An entry
  whose until is STALE_MS past is a worker that died benched: removed by the next call (and
  not shown by status-1.lua). Cost: O(workers benched).

  Output: the number of workers benched after the call.
  Errors: 'SQ_BAD_ARG ...' (includes/check.lua) before anything is written.
]]
--@include common

local refused = arg_refusal(function()
  check_str(ARG.worker, 'worker')
  if ARG.wait_ms ~= nil then check_ms(ARG.wait_ms, 'wait_ms') end
  if ARG.failures ~= nil then check_int(ARG.failures, 'failures', 0, MAX_INT) end
  if ARG.reason ~= nil then check_str(ARG.reason, 'reason', true) end
end)
if refused then return redis.error_reply(refused) end

local STALE_MS = 60000
local flat = redis.call('HGETALL', K.BROWSERS_DOWN)
for i = 1, #flat, 2 do
  local ok, entry = pcall(cjson.decode, flat[i + 1])
  if not ok or type(entry) ~= 'table' or (tonumber(entry['until']) or 0) < NOW - STALE_MS then
    redis.call('HDEL', K.BROWSERS_DOWN, flat[i])
  end
end
if ARG.wait_ms == nil then
  redis.call('HDEL', K.BROWSERS_DOWN, ARG.worker)
else
  local entry = {
    ['until'] = NOW + ARG.wait_ms, failures = ARG.failures or 0,
    reason = string.sub(ARG.reason or '', 1, 300),
  }
  redis.call('HSET', K.BROWSERS_DOWN, ARG.worker, cjson.encode(entry))
end
return redis.call('HLEN', K.BROWSERS_DOWN)
