--[[
  The per-domain circuit breaker (fields in domain.lua's header) and the global-fault guard.
  The domains whose breaker is open or half-open are the set sq:{Q}:open (K.OPEN), retired
  ones sq:{Q}:retired: status counts them without reading every domain.
  Depends on common.lua and domain.lua. A separate include from domain.lua so that the scripts
  that never touch a breaker do not build these functions on every call.
]]
--@include history
--@include breaker_rule

-- The sets and events of a retirement (its fields are written by breaker_apply).
local function retire(d, why)
  redis.call('SREM', K.OPEN, d)
  redis.call('SADD', K.RETIRING, d)
  redis.call('SADD', K.RETIRED, d)
  redis.call('ZREM', K.READY, d)
  redis.call('ZREM', K.WAIT, d)
  -- `jobs`: its queued jobs (ready and delayed), which the retirement sends to the dead
  -- letters (drained by the next claims, the delayed ones when due).
  local delayed = math.max(tonumber(redis.call('HGET', k_dom(d), 'delayed')) or 0, 0)
  emit('retired', d, why, {'jobs', redis.call('ZCARD', k_dq(d)) + delayed})
  stat('retirements')
  history('retired')
end

-- The global-fault guard: too many healthy domains tripping together means the fault is ours.
local function global_guard(d)
  redis.call('ZADD', K.TRIPS, NOW, d)
  redis.call('ZREMRANGEBYSCORE', K.TRIPS, '-inf', NOW - CFG.g_window_ms)
  redis.call('ZREMRANGEBYSCORE', K.ACTIVE, '-inf', NOW - CFG.g_window_ms)
  local tripped = redis.call('ZCARD', K.TRIPS)
  local active = redis.call('ZCARD', K.ACTIVE)
  if tripped < CFG.g_min or tripped < CFG.g_share * active then return false end
  local pause = RULE.backoff(CFG.cool_ms, CFG.cool_max_ms, 1, 'band')
  redis.call('HSET', K.META, 'paused_until', NOW + pause,
    'pause_reason', string.format('%d of %d active domains tripped within %.0f s',
      tripped, active, CFG.g_window_ms / 1000))
  for _, td in ipairs(redis.call('ZRANGE', K.TRIPS, 0, 999)) do
    local tf = redis.call('HMGET', k_dom(td), 'trips', 'state')
    local _, e = RULE.breaker_step({trips = tf[1], state = tf[2]}, {ev = 'pardon'}, CFG, NOW)
    if e.write then
      redis.call('HSET', k_dom(td), unpack(e.write))
      redis.call('SREM', K.OPEN, td)
      refile(td)
    end
  end
  redis.call('DEL', K.TRIPS)
  emit('global_pause', '', string.format(
    'dispatch paused %.1f s: %d of %d active domains tripped together; likely our fault',
    pause / 1000, tripped, active))
  stat('global_pauses')
  history('pause')
  return true
end

-- Write what RULE.breaker_step answered for domain d: `new` its state after, `e` the effects.
-- An opening from closed lets the global-fault guard look.
local function breaker_apply(d, new, e)
  if e.write then redis.call('HSET', k_dom(d), unpack(e.write)) end
  if e.open then
    -- the window stays: what tripped it is what the dashboard shows while it is open
    redis.call('SADD', K.OPEN, d)
    emit('trip', d, string.format('%s; open for %.1f s (trip %d)', e.open.why,
      e.open.cool / 1000, new.trips))
    stat('trips')
    history('trip')
    refile(d)
    if e.guard then global_guard(d) end
  elseif e.retire then
    retire(d, e.retire)
  elseif e.close then
    redis.call('SREM', K.RETIRING, d)
    redis.call('SREM', K.RETIRED, d)
    redis.call('SREM', K.OPEN, d)
    emit(e.close[1], d, e.close[2])
  end
end

-- The last failures charged to a domain's breaker, kept in its hash (`errs`) for the
-- dashboard: a throttled or retried job is not a dead letter, so its errors are nowhere else.
local ERRS_KEPT = 10
local ERR_CHARS = 200

local function clip(text, n)
  text = tostring(text or '')
  if #text > n then text = string.sub(text, 1, n - 3) .. '...' end
  return text
end

-- A failure of job `job_id` charged to domain d (kind, message: the settlement's): kept
-- among its last errors, and counted per hour for the failure-spike alarm unless dispatch
-- is paused (`paused`: the global guard: then the fault is most likely ours).
local function note_failure(d, job_id, kind, message, paused)
  local dk = k_dom(d)
  local ok, errs = pcall(cjson.decode, redis.call('HGET', dk, 'errs') or '[]')
  if not ok or type(errs) ~= 'table' then errs = {} end
  errs[#errs + 1] = {at = NOW, kind = clip(kind, 64), msg = clip(message, ERR_CHARS),
    id = job_id}
  while #errs > ERRS_KEPT do table.remove(errs, 1) end
  redis.call('HSET', dk, 'errs', cjson.encode(errs))
  if not paused then count_hourly(d, 'f') end
end

-- Record one outcome of job `job_id` for domain d: failed true/false; kind and message
-- describe a failure.
local ACTIVE_SEEN = {}
-- Domains read closed with a spotless window (no failure, full) during this call: a success
-- there changes nothing, so later successes skip the read. Emptied before any breaker
-- write (of any domain: the global guard resets other domains too).
local SPOTLESS = {}
-- The outcome RULE.breaker_step is given for each settle, one table filled again each time
-- (the rule keeps nothing of it): a settle builds no table for it.
local RESULT = {ev = 'result', failed = false, job = '', paused = false}

local function breaker_outcome(d, failed, job_id, kind, message)
  local dk = k_dom(d)
  local paused = failed and paused_until() ~= nil
  if failed then note_failure(d, job_id, kind, message, paused) end
  if not ACTIVE_SEEN[d] then
    ACTIVE_SEEN[d] = true
    redis.call('ZADD', K.ACTIVE, NUMTEXT.of(NOW), d)
  end
  if not failed and SPOTLESS[d] then return end
  -- the fields an outcome reads (not open_until: the settle's hot path)
  local f = redis.call('HMGET', dk, 'state', 'fails', 'win', 'probe', 'trips')
  if not failed and (not f[1] or f[1] == 'closed') then
    -- a success on a closed breaker: the rule's own short form (RULE.breaker_success), what
    -- RULE.breaker_step answers for it, written without rewriting a `fails` already 0
    local win = RULE.breaker_success(f[2], f[3], CFG.window)
    if not win then
      SPOTLESS[d] = true
    elseif f[2] == '0' then
      SPOTLESS = {}
      redis.call('HSET', dk, 'win', win)
    else
      SPOTLESS = {}
      redis.call('HSET', dk, 'fails', '0', 'win', win)
    end
    return
  end
  RESULT.failed, RESULT.job, RESULT.paused = failed, job_id, paused
  local new, e = RULE.breaker_step({state = f[1], fails = f[2], win = f[3], probe = f[4],
    trips = f[5]}, RESULT, CFG, NOW)
  if e.spotless then
    SPOTLESS[d] = true
    return
  end
  if e.write then SPOTLESS = {} end
  breaker_apply(d, new, e)
end
