--[[
  Read-only: queue-wide figures for `status`.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {lanes = [names]}  lanes to report (the configured ones)

  Output: JSON text {now, stats = {field: n}, ready, delayed, inflight, dead, domains,
    lanes = {name: {ready, delayed, oldest_ready_ms}}, paused_until, pause_reason, retired}
    oldest_ready_ms: ms since the lane last had a job claimed or last became non-empty,
    whichever is later (0 when it has no ready job): how long it has waited to be served.
]]
--@include common

local stats = {}
local flat = redis.call('HGETALL', K_STATS)
for i = 1, #flat, 2 do stats[flat[i]] = tonumber(flat[i + 1]) end
local since = {}
flat = redis.call('HGETALL', K_LANE_SINCE)
for i = 1, #flat, 2 do since[flat[i]] = tonumber(flat[i + 1]) end
local names = ARG.lanes
for _, l in ipairs(redis.call('SMEMBERS', K_LANES)) do
  local known = false
  for _, n in ipairs(names) do if n == l then known = true end end
  if not known then names[#names + 1] = l end
end
local lanes = {}
local ready = 0
for _, l in ipairs(names) do
  -- counters kept by the scripts (jobs.lua: lane_ready): no per-job index is read
  local n = math.max(stats['ready:' .. l] or 0, 0)
  local oldest = 0
  if n > 0 then oldest = math.max(0, NOW - (since[l] or NOW)) end
  lanes[l] = {ready = n, delayed = stats['delayed:' .. l] or 0, oldest_ready_ms = oldest}
  ready = ready + n
end
local meta = redis.call('HMGET', K_META, 'paused_until', 'pause_reason')
local paused = tonumber(meta[1])
if paused and paused <= NOW then paused = nil end
return cjson.encode({
  now = NOW, stats = stats, ready = ready, delayed = redis.call('ZCARD', K_DELAYED),
  inflight = redis.call('ZCARD', K_INFLIGHT), dead = redis.call('ZCARD', K_DEAD),
  domains = redis.call('SCARD', K_DOMAINS), lanes = lanes, lane_order = names,
  paused_until = paused or cjson.null, pause_reason = meta[2] or cjson.null,
  retired = redis.call('SMEMBERS', K_RETIRED),
})
