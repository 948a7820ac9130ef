--[[
  Read-only: queue-wide figures for `status`.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {lanes = [names], top?}  lanes to report (the configured ones); top: how
             many domains to pick for per-domain detail (absent: none picked)

  Output: JSON text {now, stats = {field: n}, ready, delayed, inflight, dead, domains,
    lanes = {name: {ready, delayed, oldest_ready_ms}}, paused_until, pause_reason, retired,
    exits_down_until (ms: every exit of the pool is down until then; null otherwise),
    browsers_down (workers whose browsers are benched: [{worker, until, failures, reason}],
    at most 100; browser_down-1.lua),
    open_breakers, retired_domains, top, owed}
    owed          results lines owed to a sink (includes/owed.lua): settled, not yet written
    retired       at most 1,000 retired domains (retired_domains: how many there are)
    open_breakers domains whose breaker is open or half-open (the set sq:{Q}:open)
    top           (with `top`) the domains worth showing, at most `top`: every domain when
                  the queue has no more; else those with a breaker not closed, those of the
                  latest dead letters, the most urgent ready ones and the next to wake up,
                  in that order.
  Cost: O(top + lanes), whatever the number of domains (a queue of at most `top` domains
  reads the registry's buckets that hold them: includes/registry.lua).
    oldest_ready_ms: ms since the lane last had a job claimed or last became non-empty,
    whichever is later (0 when it has no ready job): how long it has waited to be served.
]]
--@include common
--@include exits

local refused = arg_refusal(function()
  check_list(ARG.lanes, 'lanes', check_str)
  if ARG.top ~= nil then check_int(ARG.top, 'top', 0, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local stats = {}
local flat = redis.call('HGETALL', K.STATS)
for i = 1, #flat, 2 do stats[flat[i]] = tonumber(flat[i + 1]) end
local since = {}
flat = redis.call('HGETALL', K.LANE_SINCE)
for i = 1, #flat, 2 do since[flat[i]] = tonumber(flat[i + 1]) end
local names = ARG.lanes
for _, l in ipairs(redis.call('SMEMBERS', K.LANES)) do
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
-- Every domain the queue knows (the registry).
local KNOWN = tonumber(redis.call('GET', K.DCOUNT)) or 0

-- The domains worth showing (see the header), at most `top`.
local function pick_top(top)
  local picked, seen = {}, {}
  local function add(d)
    if d and #picked < top and not seen[d] then
      seen[d] = true
      picked[#picked + 1] = d
    end
  end
  if KNOWN <= top then
    for b in pairs(registry_buckets()) do
      for _, d in ipairs(redis.call('HKEYS', P .. 'reg:' .. b)) do add(d) end
    end
    table.sort(picked)
    return picked
  end
  for _, d in ipairs(redis.call('SRANDMEMBER', K.OPEN, top)) do add(d) end
  for _, d in ipairs(redis.call('SRANDMEMBER', K.RETIRED, top)) do add(d) end
  local dead = redis.call('ZREVRANGE', K.DEAD, 0, top - 1)
  if #dead > 0 and #picked < top then
    local keys = {}
    for i, id in ipairs(dead) do keys[i] = k_job(id) end
    for i, raw in ipairs(redis.call('MGET', unpack(keys))) do
      local job = raw and load_job(dead[i], raw)
      if job then add(job.domain) end
    end
  end
  for _, key in ipairs({K.READY, K.WAIT}) do
    if #picked < top then
      for _, d in ipairs(redis.call('ZRANGE', key, 0, top - 1)) do add(d) end
    end
  end
  return picked
end

local top = {}
if tonumber(ARG.top) and ARG.top > 0 then top = pick_top(math.floor(ARG.top)) end
local retired
if redis.call('SCARD', K.RETIRED) <= 1000 then
  retired = redis.call('SMEMBERS', K.RETIRED)
else
  retired = redis.call('SRANDMEMBER', K.RETIRED, 1000)
end

-- every exit of the pool down (includes/exits.lua: claims take nothing until this time)
local exits_back = EX.all_down()

-- workers whose browsers are benched (browser_down-1.lua); one STALE_MS past: a worker gone
local browsers = {}
local flat_down = redis.call('HGETALL', K.BROWSERS_DOWN)
for i = 1, math.min(#flat_down, 200), 2 do
  local ok, b = pcall(cjson.decode, flat_down[i + 1])
  if ok and type(b) == 'table' and (tonumber(b['until']) or 0) >= NOW - 60000 then
    browsers[#browsers + 1] = {worker = flat_down[i], ['until'] = b['until'],
      failures = b.failures, reason = b.reason}
  end
end

local meta = redis.call('HMGET', K.META, 'paused_until', 'pause_reason')
local paused = tonumber(meta[1])
if paused and paused <= NOW then paused = nil end
return cjson.encode({
  now = NOW, stats = stats, ready = ready, delayed = redis.call('ZCARD', K.DELAYED),
  inflight = redis.call('ZCARD', K.INFLIGHT), dead = redis.call('ZCARD', K.DEAD),
  domains = KNOWN, lanes = lanes, lane_order = names,
  paused_until = paused or cjson.null, pause_reason = meta[2] or cjson.null,
  retired = retired, retired_domains = redis.call('SCARD', K.RETIRED),
  open_breakers = redis.call('SCARD', K.OPEN), top = top,
  exits_down_until = exits_back or cjson.null, owed = redis.call('HLEN', K.OWED),
  browsers_down = browsers,
})
