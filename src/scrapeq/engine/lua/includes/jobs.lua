--[[
  Moving one job between places. Depends on common.lua and domain.lua.

  A job is in exactly one place:
    ready     sq:{Q}:dq:<domain> (score: priority = eligible + lane offset), counted in its
              lane's ready:<lane> in sq:{Q}:stats (lane_ready)
    delayed   sq:{Q}:delayed (score: eligible time)
    inflight  sq:{Q}:inflight (score: lease deadline)
    dead      sq:{Q}:dead and sq:{Q}:ddead:<domain> (score: died time)
    done      nowhere: the job key is deleted and counters move (with keep_done, the key is
              kept that long with done_at and a TTL)
]]
--@include history
--@include backoff
--@include budgets

-- Ready jobs per lane are counters (no index of their own: issue 13): ready:<lane> in
-- sq:{Q}:stats, and in sq:{Q}:lane-since the time the lane last had a job claimed or last
-- became non-empty (status: its oldest_ready_age). `by` < 0: jobs left ready (clamped at 0).
local function lane_ready(lane, by)
  local n = redis.call('HINCRBY', K.STATS, 'ready:' .. lane, NUMTEXT.of(by))
  if by > 0 and n == by then
    redis.call('HSET', K.LANE_SINCE, lane, NOW)
  elseif n < 0 then
    redis.call('HSET', K.STATS, 'ready:' .. lane, 0)
  end
end

-- n ready jobs of a lane were claimed: the lane was served now.
local function lane_served(lane, n)
  lane_ready(lane, -n)
  redis.call('HSET', K.LANE_SINCE, lane, NUMTEXT.of(NOW))
end

local function put_ready(job)
  redis.call('ZADD', k_dq(job.domain), job.eligible + job.off, job.id)
  lane_ready(job.lane, 1)
end

local function put_delayed(job, at)
  job.eligible = at
  redis.call('ZADD', K.DELAYED, at, job.id)
  redis.call('HINCRBY', k_dom(job.domain), 'delayed', 1)
  stat('delayed:' .. job.lane, 1)
end

local function release_unique(job)
  if job.fp and redis.call('HGET', K.UNIQUE, job.fp) == job.id then
    redis.call('HDEL', K.UNIQUE, job.fp)
  end
end

-- Dead-letter a job that has already left its previous place.
local function dead_letter(job, reason, message, quiet)
  job.dead_reason = reason
  job.died = NOW
  if message then push_error(job, reason, message) end
  save_job(job)
  redis.call('ZADD', K.DEAD, NOW, job.id)
  redis.call('ZADD', k_ddead(job.domain), NOW, job.id)
  stat('dead_total')
  stat('dead:' .. reason)
  release_unique(job)
  count_hourly(job.domain, 'd')
  history('dead', job.lane)
  if not quiet then emit('dead', job.domain, job.id .. ': ' .. reason) end
end

-- The one home of the retry delay a client leaves to the queue (a settle item's `backoff`, a
-- reaped lease): full jitter in ms after `n` failures, uniform(0, min(cap, base * 2^(n-1))),
-- drawn from the call's seeded random (prologue.lua; the shape: backoff.lua). A retry passes
-- the attempts spent, a release the releases taken (this one included), a give-back the
-- give-backs.
-- A field of RULE, not a local: settle-1.lua, which includes this file, is near Lua 5.1's 200
-- locals (tests/engine/test_lua_locals.py).
function RULE.backoff_ms(n)
  return RULE.backoff(CFG.backoff_base_ms, CFG.backoff_cap_ms, n, 'full')
end

-- Schedule a failed attempt again, or dead-letter it when its budget is spent.
local function retry_or_dead(job, delay, kind, message)
  push_error(job, kind, message)
  if RULE.budget_spent(job, 'attempts') then
    dead_letter(job, 'max_attempts', nil)
    return 'dead'
  end
  put_delayed(job, NOW + math.max(0, math.floor(delay)))
  save_job(job)
  stat('retried')
  history('retried', job.lane)
  return 'retried'
end
