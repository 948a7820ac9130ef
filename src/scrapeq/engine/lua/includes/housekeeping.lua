--[[
  Bounded maintenance run by every claim (and by the reap script), and the repairs it shares
  with claiming (orphans, corrupt texts, expired jobs). Depends on common.lua, domain.lua,
  jobs.lua. Each step handles at most `budget` items. Only the scripts that need these include
  this file: every script call builds all of its functions, used or not.
]]

-- Counters of a job leaving the delayed zset (the caller removes it from the zset).
local function left_delayed(job)
  redis.call('HINCRBY', k_dom(job.domain), 'delayed', -1)
  stat('delayed:' .. job.lane, -1)
end

-- Best effort: the domain and lane named in a damaged job text (truncated JSON keeps them);
-- in a compact text (common.lua) the domain may be its URL's host and the lane the default.
local function salvage_fields(raw)
  if type(raw) ~= 'string' then return nil, nil end
  local d = string.match(raw, '"domain"%s*:%s*"([^"]*)"')
  local lane = string.match(raw, '"lane"%s*:%s*"([^"]*)"')
  local url = string.match(raw, '"u"%s*:%s*"([^"]*)"')
  if url then
    d = string.match(raw, '"d"%s*:%s*"([^"]*)"') or url_host((string.gsub(url, '\\/', '/')))
    lane = string.match(raw, '"l"%s*:%s*"([^"]*)"') or 'normal'
  end
  return d, lane
end

-- A stored value that is not a valid job: keep its raw text as a dead letter.
-- `place` is where it was found ('ready', 'delayed' or 'inflight'; the caller removed it from
-- that zset), `domain` the domain it was filed under ('' when unknown). The counters of that
-- place (delayed per domain and lane, a domain's inflight slot) are fixed when the domain is
-- known or the damaged text still names it (a truncated write does; a ready one's lane
-- counter too); text that names nothing leaves them for `scrapeq audit` to report.
local function dead_corrupt(id, raw, domain, place)
  local named_domain, named_lane = salvage_fields(raw)
  if place == 'ready' and named_lane then lane_ready(named_lane, -1) end
  if place == 'delayed' and named_domain and named_lane then
    redis.call('HINCRBY', k_dom(named_domain), 'delayed', -1)
    stat('delayed:' .. named_lane, -1)
  end
  if domain == '' and named_domain then domain = named_domain end
  if place == 'inflight' and domain ~= '' then free_slots(domain, 1) end
  local shown = raw
  if type(shown) == 'string' and #shown > 4000 then shown = string.sub(shown, 1, 4000) end
  local job = {id = id, url = '', domain = domain, lane = named_lane or '', off = 0,
    attempts = 0, max_attempts = 0, eligible = NOW, created = NOW, corrupt = shown or ''}
  dead_letter(job, 'corrupt_payload', 'stored job is not valid JSON or lacks fields')
  if place == 'inflight' and domain ~= '' then refile(domain) end
end

local function expired(job)
  return type(job.expires) == 'number' and job.expires <= NOW
end

-- A claimed job leaves inflight: lease removed and the domain's slot freed (unless it was
-- given back when its download ended).
local function leave_inflight(job)
  redis.call('ZREM', K.INFLIGHT, job.id)
  redis.call('HDEL', K.LEASED, job.id)
  if lease_held_slot(job) then free_slots(job.domain, 1) end
end

-- An expired lease whose job key is gone (evicted, deleted by hand): the job is lost, but
-- the lease's domain (K.LEASED) gets its slot back, so its other jobs are not stranded.
local function reap_lost(id)
  local d = redis.call('HGET', K.LEASED, id)
  redis.call('ZREM', K.INFLIGHT, id)
  redis.call('HDEL', K.LEASED, id)
  stat('lost')
  if not d then return end
  free_slots(d, 1)
  probe_ended(d, id)
  emit('lost', d, id .. ': job key missing when its lease expired (evicted?)')
  refile(d)
end

-- An expired lease whose job's handler was not marked running (heartbeat-1.lua, `h`): the
-- worker died or stalled while the job waited on the network or for a handler, or never got
-- the claim's reply (lease never renewed: `lease_unused`). Its attempt is given back, at most
-- 2 x max_attempts times per job (`unused`), so a job that kills workers outside its handler
-- still dies. A worker runs the handler of a job with `unused` alone, marked, so the next
-- crash is known to be its own: a job killing its workers in its handler dies after
-- max_attempts + 1 deaths, and a job in flight beside every one of them keeps its budget
-- (twice over). Returns whether it was given back.
local function give_back(job, deadline)
  if RULE.budget_spent(job, 'give_backs') then return false end
  job.unused = (job.unused or 0) + 1
  job.attempts = math.max(job.attempts - 1, 0)
  if deadline > (tonumber(job.claimed) or 0) + (job.lm or CFG.lease_ms) then
    push_error(job, 'worker_lost', 'lease expired while its handler was not running (the '
      .. 'worker died or stalled beside it): the attempt is not counted')
  else
    push_error(job, 'lease_unused', 'lease expired with no heartbeat or result (the claim '
      .. 'reply was lost, or the worker died at once): the attempt is not counted')
  end
  put_delayed(job, NOW + RULE.backoff_ms(job.unused))
  save_job(job)
  return true
end

-- An expired lease, its job loaded and out of inflight: retry or dead when its handler ran
-- (the worker died in it) or its give-backs are spent, else given back.
local function reap_job(job, deadline)
  local ran = job.hr ~= nil and job.hr == job.token
  job.hr = nil
  if ran then
    retry_or_dead(job, RULE.backoff_ms(job.attempts), 'lease_expired',
      'lease expired while its handler ran: the worker died or stalled in it')
  elseif not give_back(job, deadline) then
    retry_or_dead(job, RULE.backoff_ms(job.attempts), 'lease_expired',
      'lease expired: the worker stopped (crash or stall); the attempts given back are spent')
  end
end

-- Expired leases: reap_job decides whether the attempt is spent; no domain blamed.
local function reap_expired(budget)
  local found = redis.call('ZRANGEBYSCORE', K.INFLIGHT, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0,
    budget)
  local ids = {}
  for i = 1, #found, 2 do
    local id, deadline = found[i], tonumber(found[i + 1])
    ids[#ids + 1] = id
    local job, raw = load_job(id)
    if job then
      leave_inflight(job)
      probe_ended(job.domain, id)
      stat('reaped')
      reap_job(job, deadline)
      refile(job.domain)
    elseif job == false then
      local d = redis.call('HGET', K.LEASED, id) or ''
      redis.call('ZREM', K.INFLIGHT, id)
      redis.call('HDEL', K.LEASED, id)
      dead_corrupt(id, raw, d, 'inflight')
    else
      reap_lost(id)
    end
  end
  return #ids
end

-- Due delayed jobs move to their domain's ready zset.
local function promote_due(budget)
  local ids = redis.call('ZRANGEBYSCORE', K.DELAYED, '-inf', NOW, 'LIMIT', 0, budget)
  local touched = {}
  for _, id in ipairs(ids) do
    redis.call('ZREM', K.DELAYED, id)
    local job, raw = load_job(id)
    if job then
      left_delayed(job)
      if redis.call('HGET', k_dom(job.domain), 'state') == 'retired' then
        dead_letter(job, 'domain_unavailable', 'domain is retired', true)
      elseif expired(job) then
        dead_letter(job, 'expired', 'expired before it was claimed')
      else
        put_ready(job)
        touched[job.domain] = true
      end
    elseif job == false then
      dead_corrupt(id, raw, '', 'delayed')
    end
  end
  for d in pairs(touched) do refile(d) end
  return #ids
end

local function wake_due(budget)
  local ds = redis.call('ZRANGEBYSCORE', K.WAIT, '-inf', NOW, 'LIMIT', 0, budget)
  for _, d in ipairs(ds) do refile(d) end
  return #ds
end

-- The head of domain d's ready queue taken off it, at most `budget` ids: each job that
-- loads handed to take(job, id), a corrupt one dead-lettered (as a claim would), an id
-- without its job gone with the ZREM. Returns how many ids were taken.
local function take_ready(d, budget, take)
  local ids = redis.call('ZRANGE', k_dq(d), 0, budget - 1)
  for _, id in ipairs(ids) do
    redis.call('ZREM', k_dq(d), id)
    local job, raw = load_job(id)
    if job then
      take(job, id)
    elseif job == false then
      dead_corrupt(id, raw, d, 'ready')
    end
  end
  return #ids
end

-- Retired domains' backlogs go to the dead letters, a bounded slice per call.
local function drain_one(d, budget)
  local taken = take_ready(d, budget, function(job)
    lane_ready(job.lane, -1)
    dead_letter(job, 'domain_unavailable', 'domain is retired', true)
  end)
  if taken == 0 or redis.call('ZCARD', k_dq(d)) == 0 then
    redis.call('SREM', K.RETIRING, d)
  end
  return taken
end

local function drain_retiring(budget)
  for _, d in ipairs(redis.call('SMEMBERS', K.RETIRING)) do
    if budget <= 0 then return end
    if redis.call('HGET', k_dom(d), 'state') == 'retired' then
      budget = budget - drain_one(d, budget)
    else
      redis.call('SREM', K.RETIRING, d)  -- reset since: its jobs stay
    end
  end
end

-- The end of a global pause, announced once (event global_resume) by the first
-- housekeeping after it: dispatch resumes with the first claim. meta.pause_ended keeps the
-- paused_until whose end was announced.
local function announce_pause_end()
  local m = redis.call('HMGET', K.META, 'paused_until', 'pause_ended')
  local until_ms = tonumber(m[1])
  if until_ms and until_ms <= NOW and m[1] ~= m[2] then
    redis.call('HSET', K.META, 'pause_ended', m[1])
    emit('global_resume', '', string.format('dispatch resumed: the global pause ended %.1f s ago',
      (NOW - until_ms) / 1000))
  end
end

-- Domains idle (domain.lua: note_idle) for CFG.domain_ttl_ms are forgotten: their hash
-- (counters, dead-letter rate) and their place in the registry (common.lua) go, so the domain table does
-- not grow for ever. One busy again leaves sq:{Q}:idle (noted again when next idle); one with
-- dead letters or per-domain overrides is kept, and looked at again a ttl later.
local function forget_idle(budget)
  local ttl = tonumber(CFG.domain_ttl_ms) or 0
  if ttl <= 0 then return 0 end
  local ds = redis.call('ZRANGEBYSCORE', K.IDLE, '-inf', NOW - ttl, 'LIMIT', 0, budget)
  for _, d in ipairs(ds) do
    local dk = k_dom(d)
    local f = redis.call('HMGET', dk, 'inflight', 'delayed', 'state', 'delay', 'conc')
    if (tonumber(f[1]) or 0) > 0 or (tonumber(f[2]) or 0) > 0 or (f[3] or 'closed') ~= 'closed'
        or redis.call('EXISTS', k_dq(d)) == 1 then
      redis.call('ZREM', K.IDLE, d)
    elseif f[4] or f[5] or redis.call('EXISTS', k_ddead(d)) == 1 then
      redis.call('ZADD', K.IDLE, NOW, d)
    else
      redis.call('DEL', dk, k_dexit(d))  -- its exits' benches and tier too (exits.lua)
      registry_del(d)
      redis.call('ZREM', K.IDLE, d)
      redis.call('ZREM', K.ACTIVE, d)
      stat('domains_forgotten')
    end
  end
  return #ds
end

local function housekeeping(budget)
  announce_pause_end()
  reap_expired(budget)
  promote_due(budget)
  wake_due(budget)
  drain_retiring(budget)
  forget_idle(budget)
end

-- ms until the next known due time; 0 when `ready_now` (or a retired backlog is still being
-- drained), -1 when nothing is scheduled.
local function next_due_ms(ready_now)
  if ready_now or redis.call('ZCARD', K.READY) > 0 or redis.call('SCARD', K.RETIRING) > 0 then
    return 0
  end
  local best = nil
  for _, key in ipairs({K.DELAYED, K.WAIT, K.INFLIGHT}) do
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #head > 0 then
      local at = tonumber(head[2])
      if best == nil or at < best then best = at end
    end
  end
  if best == nil then return -1 end
  return math.max(0, best - NOW)
end
