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
local ERRS_KEPT = 10  --@once
local ERR_CHARS = 200  --@once

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

-- What a call keeps of the breakers between its outcomes (one local: the settle's budget):
--   active    domains ZADDed to the active set by this call (once a call each)
--   spotless  domains read closed with a spotless window (no failure, full) during this call:
--             a success there changes nothing, so later successes skip the read. Emptied
--             before any breaker write of the store (of any domain: the global guard resets
--             other domains too).
--   wins      domain -> its window after this call's successes on its closed breaker (its
--             `fails` 0 from the first): the next success goes on from it without a read
--   due       domains whose `wins` entry is not written yet. BRK.flush writes them before
--             any other read of a breaker field and at the end of the call (settle-1.lua:
--             flush_items), so one write per domain and call stands for a run of successes.
--   outcomes  the outcomes this call records at most (settle-1.lua: its items), whether the
--             active set is made a skiplist (calls.lua: zadd_skiplist)
local BRK = {active = {}, spotless = {}, wins = {}, due = {}, outcomes = 0}

function BRK.flush()
  for d in pairs(BRK.due) do
    redis.call('HSET', k_dom(d), 'fails', '0', 'win', BRK.wins[d])
  end
  BRK.wins, BRK.due = {}, {}
end

-- A success on domain d's closed breaker whose `fails` and `win` are these: the rule's own
-- short form (RULE.breaker_success), what RULE.breaker_step answers for it.
function BRK.success(d, fails, win)
  win = RULE.breaker_success(fails, win, CFG.window)
  if not win then
    BRK.spotless[d] = true
    return
  end
  BRK.wins[d] = win
  BRK.due[d] = true
end

-- The outcome RULE.breaker_step is given for each settle, one table filled again each time
-- (the rule keeps nothing of it): a settle builds no table for it.
local RESULT = {ev = 'result', failed = false, job = '', paused = false}

-- Record one outcome of job `job_id` for domain d: failed true/false; kind and message
-- describe a failure.
local function breaker_outcome(d, failed, job_id, kind, message)
  local dk = k_dom(d)
  local paused = failed and paused_until() ~= nil
  if failed then note_failure(d, job_id, kind, message, paused) end
  if not BRK.active[d] then
    if next(BRK.active) == nil then  -- the call's first (calls.lua: zadd_skiplist)
      zadd_skiplist(K.ACTIVE, BRK.outcomes, {NUMTEXT.of(NOW), d})
    else
      redis.call('ZADD', K.ACTIVE, NUMTEXT.of(NOW), d)
    end
    BRK.active[d] = true
  end
  if not failed and BRK.spotless[d] then return end
  if not failed and BRK.wins[d] then return BRK.success(d, '0', BRK.wins[d]) end
  BRK.flush()  -- the fields read here are the store's
  -- the fields an outcome reads (not open_until: the settle's hot path)
  local f = redis.call('HMGET', dk, 'state', 'fails', 'win', 'probe', 'trips')
  if not failed and (not f[1] or f[1] == 'closed') then
    return BRK.success(d, f[2], f[3])  -- a success on a closed breaker
  end
  RESULT.failed, RESULT.job, RESULT.paused = failed, job_id, paused
  local new, e = RULE.breaker_step({state = f[1], fails = f[2], win = f[3], probe = f[4],
    trips = f[5]}, RESULT, CFG, NOW)
  if e.spotless then
    BRK.spotless[d] = true
    return
  end
  if e.write then BRK.spotless = {} end
  breaker_apply(d, new, e)
end
