--[[
  Claim up to N jobs across domains, most urgent first.

  Before picking, a claim does bounded housekeeping so its cost stays O(log D + batch):
  reaps up to `batch` expired leases, promotes up to `batch` due delayed jobs, wakes up to
  `batch` due domains, and dead-letters up to `batch` jobs of retired domains.
  Parked domains (open breaker, politeness slot, concurrency cap) are never touched.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (conc, delay_ms, lease_ms, batch, ...)
    ARGV[3]  JSON {n = max jobs, seed = random seed}

  Output: {next_ms, job_json_1, ..., job_json_k}
    next_ms  ms until the next known due time (delayed job, waiting domain or end of a
             global pause); -1 when nothing is scheduled. 0 when jobs are ready now.
    job_json the claimed job with its new token and attempts (attempts counts this one)
]]
--@include common
--@include domain
--@include jobs
--@include housekeeping

-- Fencing tokens: the batch reserves N at its first lease (gaps are fine: tokens only grow).
local TOKENS = {next = 0, last = -1}
local function next_token()
  if TOKENS.next > TOKENS.last then
    local n = tonumber(ARG.n) or 1
    TOKENS.last = redis.call('HINCRBY', K_META, 'token', n)
    TOKENS.next = TOKENS.last - n + 1
  end
  local token = TOKENS.next
  TOKENS.next = token + 1
  return token
end

-- Lease one job: attempt spent, fresh token, lease deadline. The domain's counters are
-- updated once per run by take_run.
local function lease(job, probe_domain)
  job.attempts = job.attempts + 1
  job.token = next_token()
  job.claimed = NOW
  redis.call('ZADD', K_INFLIGHT, NOW + CFG.lease_ms, job.id)
  redis.call('ZREM', k_lane(job.lane), job.id)
  if probe_domain then redis.call('HSET', k_dom(probe_domain), 'probe', job.id) end
  local encoded = cjson.encode(job)
  redis.call('SET', k_job(job.id), encoded)
  return encoded
end

-- A popped id that cannot be claimed: orphan, corrupt or expired. True when it was claimable.
local function claimable(id, d)
  local job, raw = load_job(id)
  if job == nil then
    forget_ready(id)
    stat('orphans')
    return nil
  elseif job == false then
    dead_corrupt(id, raw, d, 'ready')
    return nil
  end
  if expired(job) then
    redis.call('ZREM', k_lane(job.lane), id)
    dead_letter(job, 'expired', 'expired before it was claimed')
    return nil
  end
  return job
end

-- Take a run of jobs from domain d (the most urgent ready domain): as many as its free
-- slots and `room` allow while its head stays at least as urgent as `bound` (the next
-- domain's priority), so global priority order holds with one refile per run.
local function take_run(d, room, bound, out)
  local dk = k_dom(d)
  local f = redis.call('HMGET', dk, 'inflight', 'conc', 'delay', 'state')
  local state = f[4] or 'closed'
  local delay = tonumber(f[3]) or CFG.delay_ms
  local budget = math.min(room, domain_cap(f[2], state) - (tonumber(f[1]) or 0))
  if delay > 0 or state == 'half_open' then budget = math.min(budget, 1) end
  local leased = 0
  for pops = 1, budget do
    local popped = redis.call('ZPOPMIN', k_dq(d))
    if #popped == 0 then break end
    if pops > 1 and tonumber(popped[2]) > bound then
      redis.call('ZADD', k_dq(d), popped[2], popped[1])  -- another domain is more urgent
      break
    end
    local job = claimable(popped[1], d)
    if job then
      out[#out + 1] = lease(job, state == 'half_open' and d or nil)
      leased = leased + 1
    end
  end
  if leased > 0 then
    redis.call('HINCRBY', dk, 'inflight', leased)
    if delay > 0 then redis.call('HSET', dk, 'next', NOW + delay) end
  end
end

local function pick(n)
  local out = {}
  local guard = 0
  while #out < n and guard < 2 * n + 50 do
    guard = guard + 1
    local top = redis.call('ZRANGE', K_READY, 0, 1, 'WITHSCORES')
    if #top == 0 then break end
    local d = top[1]
    local bound = math.huge
    if top[4] then bound = tonumber(top[4]) end
    take_run(d, n - #out, bound, out)
    refile(d, true)
  end
  return out
end

local paused = paused_until()
if paused then
  return {paused - NOW}
end
housekeeping(CFG.batch)
local jobs = pick(tonumber(ARG.n) or 1)
local result = {next_due_ms(#jobs > 0)}
for _, j in ipairs(jobs) do result[#result + 1] = j end
return result
