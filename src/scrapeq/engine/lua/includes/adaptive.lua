--[[
  Adaptive politeness (domain_concurrency = auto), its reads and writes: the rule itself is
  adaptive_rule.lua (adaptive_step, pure). Depends on common.lua and domain.lua (adaptive_on,
  adaptive_start). The state lives in the domain's hash, under the fields ADAPTIVE_FIELDS
  names (adaptive_rule.lua documents each).
]]
--@include adaptive_rule

-- The fields adaptive_read asks for (the domain's override, its in-flight count, then the
-- state's), and the argument list adaptive_write fills (field names in place): built once.
local ADAPTIVE_IO = {read = {'conc', 'inflight'}, write = {}}  --@once
-- filled at a script's first call: a library (engine/lua/library.py) calls no ipairs at load
if #ADAPTIVE_IO.write == 0 then
  for i, f in ipairs(ADAPTIVE_FIELDS) do
    ADAPTIVE_IO.read[i + 2] = f[2]
    ADAPTIVE_IO.write[2 * i - 1] = f[2]
  end
end

-- The adaptive state of domain key dk (nil: not adaptive), with its limit at the queue's
-- start when none was learned yet.
local function adaptive_read(dk)
  local got = redis.call('HMGET', dk, unpack(ADAPTIVE_IO.read))
  if not adaptive_on(got[1]) then return nil end
  local state = {inflight = tonumber(got[2])}
  for i, f in ipairs(ADAPTIVE_FIELDS) do state[f[1]] = tonumber(got[i + 2]) end
  state.limit = state.limit or adaptive_start()
  return state
end

local function adaptive_write(dk, state)
  local args = ADAPTIVE_IO.write
  for i, f in ipairs(ADAPTIVE_FIELDS) do
    local v = state[f[1]]
    args[2 * i] = v == nil and '' or v
  end
  redis.call('HSET', dk, unpack(args))
end

-- The breaker input of settle item `it` for domain d, after its outcome adjusted the
-- domain's rate: it.domain_failed, or nil when an overload is excused (then `it` becomes a
-- throttle).
local function adaptive_outcome(d, job, it)
  local lat = tonumber(it.latency)
  if not lat then return it.domain_failed end
  local dk = k_dom(d)
  local state = adaptive_read(dk)
  if not state then return it.domain_failed end
  local df = it.domain_failed
  if df == cjson.null then df = nil end
  local new, excused = adaptive_step(state, {now = NOW, lat = lat,
    overload = it.overload == true, outcome = it.outcome, failed = df,
    claimed = tonumber(job.claimed), min = CFG.conc_min, max = CFG.conc_max})
  if new then adaptive_write(dk, new) end
  if not excused then return df end
  if it.outcome == 'retry' then
    it.outcome = 'throttle'
    it.delay = 0
  end
  return nil
end
