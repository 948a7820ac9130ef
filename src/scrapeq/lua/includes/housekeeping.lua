--[[
  Bounded maintenance run by every claim (and by the reap script). Depends on common.lua,
  domain.lua, jobs.lua. Each step handles at most `budget` items.
]]

-- Expired leases: the attempt is spent (a job that kills workers ends dead), no domain blamed.
local function reap_expired(budget)
  local ids = redis.call('ZRANGEBYSCORE', K_INFLIGHT, '-inf', NOW, 'LIMIT', 0, budget)
  for _, id in ipairs(ids) do
    local job, raw = load_job(id)
    if job then
      leave_inflight(job)
      local dk = k_dom(job.domain)
      if redis.call('HGET', dk, 'probe') == id then redis.call('HSET', dk, 'probe', '') end
      stat('reaped')
      retry_or_dead(job, backoff_ms(job.attempts), 'lease_expired',
        'lease expired: the worker stopped heartbeating (crash or stall)')
      refile(job.domain)
    else
      redis.call('ZREM', K_INFLIGHT, id)
      if job == false then dead_corrupt(id, raw, '', 'inflight') end
    end
  end
  return #ids
end

-- Due delayed jobs move to their domain's ready zset.
local function promote_due(budget)
  local ids = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', NOW, 'LIMIT', 0, budget)
  local touched = {}
  for _, id in ipairs(ids) do
    redis.call('ZREM', K_DELAYED, id)
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
  local ds = redis.call('ZRANGEBYSCORE', K_WAIT, '-inf', NOW, 'LIMIT', 0, budget)
  for _, d in ipairs(ds) do refile(d) end
  return #ds
end

-- Retired domains' backlogs go to the dead letters, a bounded slice per call.
local function drain_one(d, budget)
  local ids = redis.call('ZRANGE', k_dq(d), 0, budget - 1)
  for _, id in ipairs(ids) do
    redis.call('ZREM', k_dq(d), id)
    local job, raw = load_job(id)
    if job then
      redis.call('ZREM', k_lane(job.lane), id)
      dead_letter(job, 'domain_unavailable', 'domain is retired', true)
    elseif job == false then
      dead_corrupt(id, raw, d, 'ready')
    end
  end
  if #ids == 0 or redis.call('ZCARD', k_dq(d)) == 0 then
    redis.call('SREM', K_RETIRING, d)
  end
  return #ids
end

local function drain_retiring(budget)
  for _, d in ipairs(redis.call('SMEMBERS', K_RETIRING)) do
    if budget <= 0 then return end
    if redis.call('HGET', k_dom(d), 'state') == 'retired' then
      budget = budget - drain_one(d, budget)
    else
      redis.call('SREM', K_RETIRING, d)  -- reset since: its jobs stay
    end
  end
end

local function housekeeping(budget)
  reap_expired(budget)
  promote_due(budget)
  wake_due(budget)
  drain_retiring(budget)
end

-- ms until the next known due time; 0 when `ready_now` (or a retired backlog is still being
-- drained), -1 when nothing is scheduled.
local function next_due_ms(ready_now)
  if ready_now or redis.call('ZCARD', K_READY) > 0 or redis.call('SCARD', K_RETIRING) > 0 then
    return 0
  end
  local best = nil
  for _, key in ipairs({K_DELAYED, K_WAIT, K_INFLIGHT}) do
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #head > 0 then
      local at = tonumber(head[2])
      if best == nil or at < best then best = at end
    end
  end
  if best == nil then return -1 end
  return math.max(0, best - NOW)
end
