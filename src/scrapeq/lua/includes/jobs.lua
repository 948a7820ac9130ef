--[[
  Moving one job between places. Depends on common.lua and domain.lua.

  A job is in exactly one place:
    ready     sq:{Q}:dq:<domain> (score: priority = eligible + lane offset) and
              sq:{Q}:lane:<lane> (score: when it became ready, for the oldest-ready age)
    delayed   sq:{Q}:delayed (score: eligible time)
    inflight  sq:{Q}:inflight (score: lease deadline)
    dead      sq:{Q}:dead and sq:{Q}:ddead:<domain> (score: died time)
    done      nowhere: the job key is deleted and counters move
]]

local function put_ready(job)
  redis.call('ZADD', k_dq(job.domain), job.eligible + job.off, job.id)
  redis.call('ZADD', k_lane(job.lane), NOW, job.id)
end

local function put_delayed(job, at)
  job.eligible = at
  redis.call('ZADD', K_DELAYED, at, job.id)
  redis.call('HINCRBY', k_dom(job.domain), 'delayed', 1)
  stat('delayed:' .. job.lane, 1)
end

-- Counters of a job leaving the delayed zset (the caller removes it from the zset).
local function left_delayed(job)
  redis.call('HINCRBY', k_dom(job.domain), 'delayed', -1)
  stat('delayed:' .. job.lane, -1)
end

local HOUR_MS = 3600000

local function count_dead_rate(d)
  local dk = k_dom(d)
  local f = redis.call('HMGET', dk, 'dcur', 'dc', 'dp', 'db')
  local bucket = math.floor(NOW / HOUR_MS)
  local cur, dc, dp, db = tonumber(f[1]), tonumber(f[2]) or 0, tonumber(f[3]) or 0,
    tonumber(f[4]) or 0
  if cur == nil then
    cur = bucket
  end
  while cur < bucket do
    db = db * 0.8 + dc * 0.2
    dp = dc
    dc = 0
    cur = cur + 1
    if bucket - cur > 48 then cur = bucket; dp = 0 end
  end
  redis.call('HSET', dk, 'dcur', cur, 'dc', dc + 1, 'dp', dp, 'db', db)
end

local function release_unique(job)
  if job.fp and redis.call('HGET', K_UNIQUE, job.fp) == job.id then
    redis.call('HDEL', K_UNIQUE, job.fp)
  end
end

-- Dead-letter a job that has already left its previous place.
local function dead_letter(job, reason, message, quiet)
  job.dead_reason = reason
  job.died = NOW
  if message then push_error(job, reason, message) end
  save_job(job)
  redis.call('ZADD', K_DEAD, NOW, job.id)
  redis.call('ZADD', k_ddead(job.domain), NOW, job.id)
  stat('dead_total')
  stat('dead:' .. reason)
  release_unique(job)
  count_dead_rate(job.domain)
  if not quiet then emit('dead', job.domain, job.id .. ': ' .. reason) end
end

-- Remove an id from every lane's ready index (its own lane is unknown).
local function forget_ready(id)
  for _, lane in ipairs(redis.call('SMEMBERS', K_LANES)) do
    redis.call('ZREM', k_lane(lane), id)
  end
end

-- Best effort: the domain and lane named in a damaged job text (truncated JSON keeps them).
local function salvage_fields(raw)
  if type(raw) ~= 'string' then return nil, nil end
  return string.match(raw, '"domain"%s*:%s*"([^"]*)"'), string.match(raw, '"lane"%s*:%s*"([^"]*)"')
end

-- A stored value that is not a valid job: keep its raw text as a dead letter.
-- `place` is where it was found ('ready', 'delayed' or 'inflight'; the caller removed it from
-- that zset). The counters of that place (delayed per domain and lane, a domain's inflight
-- slot) are fixed when the damaged text still names its domain and lane, as a truncated
-- write does; text that names nothing leaves them for `scrapeq` to report as they are.
local function dead_corrupt(id, raw, domain, place)
  forget_ready(id)
  local named_domain, named_lane = salvage_fields(raw)
  if place == 'delayed' and named_domain and named_lane then
    redis.call('HINCRBY', k_dom(named_domain), 'delayed', -1)
    stat('delayed:' .. named_lane, -1)
  elseif place == 'inflight' and named_domain then
    local left = redis.call('HINCRBY', k_dom(named_domain), 'inflight', -1)
    if left < 0 then redis.call('HSET', k_dom(named_domain), 'inflight', 0) end
  end
  if domain == '' and named_domain then domain = named_domain end
  local shown = raw
  if type(shown) == 'string' and #shown > 4000 then shown = string.sub(shown, 1, 4000) end
  local job = {id = id, url = '', domain = domain, lane = named_lane or '', off = 0,
    attempts = 0, max_attempts = 0, eligible = NOW, created = NOW, corrupt = shown or ''}
  dead_letter(job, 'corrupt_payload', 'stored job is not valid JSON or lacks fields')
  if place == 'inflight' and named_domain then refile(named_domain) end
end

local function expired(job)
  return type(job.expires) == 'number' and job.expires <= NOW
end

-- Full-jitter backoff in ms after `attempts` spent: uniform(0, min(cap, base * 2^(attempts-1))).
local function backoff_ms(attempts)
  attempts = math.max(attempts - 1, 0)
  local bound = CFG.backoff_base_ms * (2 ^ math.min(attempts, 60))
  if bound > CFG.backoff_cap_ms then bound = CFG.backoff_cap_ms end
  return math.floor(math.random() * bound)
end

-- A claimed job leaves inflight: lease removed and the domain's slot freed.
local function leave_inflight(job)
  redis.call('ZREM', K_INFLIGHT, job.id)
  local left = redis.call('HINCRBY', k_dom(job.domain), 'inflight', -1)
  if left < 0 then redis.call('HSET', k_dom(job.domain), 'inflight', 0) end
end

-- Schedule a failed attempt again, or dead-letter it when its budget is spent.
local function retry_or_dead(job, delay, kind, message)
  push_error(job, kind, message)
  if job.attempts >= job.max_attempts then
    dead_letter(job, 'max_attempts', nil)
    return 'dead'
  end
  put_delayed(job, NOW + math.max(0, math.floor(delay)))
  save_job(job)
  stat('retried')
  return 'retried'
end
