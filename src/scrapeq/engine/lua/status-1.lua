--[[
  Read-only: queue-wide figures for `status`.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {lanes = [names]}  lanes to report (the configured ones)

  Output: JSON text {now, stats = {field: n}, ready, delayed, inflight, dead, domains,
    lanes = {name: {ready, delayed, oldest_ready_ms}}, paused_until, pause_reason, retired}
]]
--@include common

local stats = {}
local flat = redis.call('HGETALL', K_STATS)
for i = 1, #flat, 2 do stats[flat[i]] = tonumber(flat[i + 1]) end
local names = ARG.lanes
for _, l in ipairs(redis.call('SMEMBERS', K_LANES)) do
  local known = false
  for _, n in ipairs(names) do if n == l then known = true end end
  if not known then names[#names + 1] = l end
end
local lanes = {}
local ready = 0
for _, l in ipairs(names) do
  local n = redis.call('ZCARD', k_lane(l))
  local head = redis.call('ZRANGE', k_lane(l), 0, 0, 'WITHSCORES')
  local oldest = 0
  if #head > 0 then oldest = math.max(0, NOW - tonumber(head[2])) end
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
