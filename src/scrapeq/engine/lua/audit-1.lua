--[[
  Confirm, and optionally repair, problems a scan of the queue's structures suspects.

  `scrapeq audit` reads the queue in bounded slices (scrapeq/audit.py); on a live queue a
  job may move between two reads, so every suspicion is checked again here, atomically, and
  reported only when it still holds. With `repair`, what is safely fixable is fixed in the
  same step.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {repair = bool, seed, items = [{k, id?, d?, place?, lane?, fp?, exp?, obs?}]}
      k  the suspected problem:
         corrupt_job        id, d? (the ready queue holding it): its text is not a valid job
         job_without_place  id: a job key no structure names (a done job kept by
                            keep_done is one only when its key has no TTL)
         job_in_two_places  id: a job filed in more than one of delayed, inflight, dead, ready
         wrong_domain_queue id, d: a job in dq:<d> whose domain is not d
         id_without_job     id, place ('delayed', 'inflight', 'dead', 'dq', 'ddead'),
                            d (dq, ddead): an id whose job key is gone
         lane_ready_count   lane, exp, obs: the lane's ready counter (stats ready:<lane>, obs
                            when scanned) is not its number of ready jobs (exp)
         lease_domain       id: a lease without its domain record, or a record without lease
         inflight_count     d: the domain's inflight counter is not its number of leases
         delayed_count      d, exp, obs: the domain's delayed counter (obs when scanned) is
                            not its number of delayed jobs (exp, counted by the scan)
         lane_delayed_count lane, exp, obs: the same for a lane (stats delayed:<lane>)
         stranded_domain    d: ready jobs, yet the domain is in neither domains:ready nor
                            domains:wait, nor at its cap with leases out, nor at its crawl
                            limit (climit: done and leases reach it; nor draining)
         stale_fingerprint  fp, id: a de-duplication fingerprint held by a job that is no
                            longer pending
         duplicate_pending  id, fp: a pending job enqueued with uniqueness (its fp, without
                            fpw) that does not hold its fingerprint: a second pending job of
                            its URL when another pending job holds it, else a lost hold
         open_set           d: the domain's breaker is open or half-open and it is not in
                            sq:{Q}:open, or the other way round
         domain_count       exp, obs: the registry's counter (sq:{Q}:dcount, obs when
                            scanned) is not the number of domains it holds (exp), or its
                            index of non-empty buckets (sq:{Q}:regb) is off

  Repairs: corrupt texts become corrupt_payload dead letters; a placeless job is filed again
  (dead letter if it died, else ready; a done one gets its TTL back, or is deleted); a job in
  two places keeps the most advanced one (inflight, dead, ready, delayed); ids without a job
  leave their structure (an inflight one frees its domain's slot, as a reap does); indexes,
  lease records and counters are set to what the structures hold; a stranded domain is filed
  again; a stale fingerprint is dropped; a unique job whose fingerprint no pending job holds
  takes it again (a second pending job of a held fingerprint is only reported).
  Delayed counters are counted again here while the delayed set holds at most 20,000 jobs;
  beyond, the scan's count applies only while the counter still reads `obs` (best effort).

  Cost: O(items), plus one pass over the leases (inflight: each one's job read) when a count
  of leases is needed
  and one over the delayed set (at most 20,000) when a delayed counter is suspected.

  Output: one entry per item, in order: {confirmed (0|1), repaired (0|1), detail}
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) when an item names no known check,
  lacks a field its check reads, or has one of the wrong type: before any repair.
]]
--@include common
--@include domain
--@include jobs
--@include housekeeping

-- What each check reads from its item besides k (all checked before the first repair).
local AUDIT_NEEDS = {
  corrupt_job = {'id'}, job_without_place = {'id'}, job_in_two_places = {'id'},
  wrong_domain_queue = {'id', 'd'}, id_without_job = {'id', 'place'},
  lane_ready_count = {'lane', 'exp', 'obs'}, lease_domain = {'id'}, inflight_count = {'d'},
  delayed_count = {'d'}, lane_delayed_count = {'lane'}, stranded_domain = {'d'},
  stale_fingerprint = {'fp', 'id'}, duplicate_pending = {'id', 'fp'}, open_set = {'d'},
  domain_count = {},
}

local function check_audit_item(it)
  check_table(it)
  local needs = AUDIT_NEEDS[it.k]
  if not needs then refuse('k', 'expected the name of a check', it.k) end
  for _, f in ipairs(needs) do
    if it[f] == nil then refuse(f, 'required by check ' .. it.k, nil) end
  end
  for _, f in ipairs({'id', 'd', 'lane', 'fp'}) do
    if it[f] ~= nil then check_str(it[f], f) end
  end
  if it.place ~= nil then
    check_enum(it.place, 'place', {'delayed', 'inflight', 'dead', 'dq', 'ddead'})
    if it.place == 'dq' or it.place == 'ddead' then check_str(it.d, 'd') end
  end
  if it.exp ~= nil then check_int(it.exp, 'exp', 0, MAX_INT) end
  if it.obs ~= nil then check_int(it.obs, 'obs', -MAX_INT, MAX_INT) end
  if it.moves ~= nil then check_table(it.moves, 'moves') end
end

local refused = arg_refusal(function()
  if ARG.repair ~= nil then check_bool(ARG.repair, 'repair') end
  check_list(ARG.items, 'items', check_audit_item)
end)
if refused then return redis.error_reply(refused) end

local REPAIR = ARG.repair == true

-- Leases holding a slot, per domain, counted once per call when first needed: the domain
-- each lease recorded, else the one its job names; a lease whose slot was given back when
-- its download ended (domain.lua: slot_given_back) holds none.
local LEASES = nil
local function leases_of(d)
  if not LEASES then
    LEASES = {}
    local recorded = {}
    local flat = redis.call('HGETALL', K.LEASED)
    for i = 1, #flat, 2 do recorded[flat[i]] = flat[i + 1] end
    for _, id in ipairs(redis.call('ZRANGE', K.INFLIGHT, 0, -1)) do
      local job = load_job(id)
      local dom = recorded[id] or (job and job.domain) or nil
      if dom and not (job and slot_given_back(job)) then LEASES[dom] = (LEASES[dom] or 0) + 1 end
    end
  end
  return LEASES[d] or 0
end

-- The places of a job filed under its own domain: list of 'inflight', 'dead', 'ready',
-- 'delayed' (in that order: the most advanced first).
local function places_of(job)
  local out = {}
  if redis.call('ZSCORE', K.INFLIGHT, job.id) then out[#out + 1] = 'inflight' end
  if redis.call('ZSCORE', K.DEAD, job.id) then out[#out + 1] = 'dead' end
  if redis.call('ZSCORE', k_dq(job.domain), job.id) then out[#out + 1] = 'ready' end
  if redis.call('ZSCORE', K.DELAYED, job.id) then out[#out + 1] = 'delayed' end
  return out
end

local function leave_place(job, place)
  if place == 'dead' then
    redis.call('ZREM', K.DEAD, job.id)
    redis.call('ZREM', k_ddead(job.domain), job.id)
  elseif place == 'ready' then
    redis.call('ZREM', k_dq(job.domain), job.id)
    lane_ready(job.lane, -1)
  elseif place == 'delayed' then
    redis.call('ZREM', K.DELAYED, job.id)
    left_delayed(job)
  end
end

local CHECKS = {}

function CHECKS.corrupt_job(it)
  local job, raw = load_job(it.id)
  if job ~= false then return false end
  if not REPAIR then return true, false, 'stored text is not a valid job' end
  local place, domain = '', ''
  if redis.call('ZREM', K.INFLIGHT, it.id) == 1 then
    place = 'inflight'
    domain = redis.call('HGET', K.LEASED, it.id) or ''
    redis.call('HDEL', K.LEASED, it.id)
  elseif redis.call('ZREM', K.DELAYED, it.id) == 1 then
    place = 'delayed'
  elseif redis.call('ZSCORE', K.DEAD, it.id) then
    redis.call('ZREM', K.DEAD, it.id)
  end
  local queued_in = it.d or salvage_fields(raw)
  if queued_in and redis.call('ZREM', k_dq(queued_in), it.id) == 1 then
    if place == '' then place = 'ready' end
    if domain == '' then domain = queued_in end
    refile(queued_in)
  end
  dead_corrupt(it.id, raw, domain, place)
  return true, true, 'kept as a corrupt_payload dead letter'
end

-- A done job kept by keep_done (`done_at`) is in no place, with a TTL: it is done. Without
-- a TTL it would stay for ever: given one again for the rest of its keep_done time, or
-- deleted when that is over.
local function done_without_ttl(job)
  local key = k_job(job.id)
  if redis.call('PTTL', key) ~= -1 then return false end
  local left = (tonumber(job.done_at) or 0) + (tonumber(CFG.keep_done_ms) or 0) - NOW
  local detail = 'done, kept with no TTL'
  if not REPAIR then return true, false, detail end
  if left > 0 then
    -- at most what keep_done takes: a damaged done_at must not fail PEXPIRE after repairs
    left = math.min(left, MAX_MS)
    redis.call('PEXPIRE', key, left)
    return true, true, detail .. ': expires in ' .. math.ceil(left / 1000) .. ' s'
  end
  redis.call('DEL', key)
  return true, true, detail .. ': deleted (its keep_done time is over)'
end

function CHECKS.job_without_place(it)
  local job = load_job(it.id)
  if not job or #places_of(job) > 0 then return false end
  if job.done_at then return done_without_ttl(job) end
  if not REPAIR then return true, false, 'domain ' .. job.domain end
  if job.dead_reason then
    redis.call('ZADD', K.DEAD, job.died or NOW, job.id)
    redis.call('ZADD', k_ddead(job.domain), job.died or NOW, job.id)
    return true, true, 'filed as a dead letter again'
  end
  put_ready(job)
  refile(job.domain)
  return true, true, 'filed as ready again'
end

function CHECKS.job_in_two_places(it)
  local job = load_job(it.id)
  if not job then return false end
  local places = places_of(job)
  if #places < 2 then return false end
  local detail = table.concat(places, ', ')
  if not REPAIR then return true, false, detail end
  for i = 2, #places do leave_place(job, places[i]) end
  refile(job.domain)
  return true, true, detail .. ': kept ' .. places[1]
end

function CHECKS.wrong_domain_queue(it)
  local job = load_job(it.id)
  if not job or job.domain == it.d or not redis.call('ZSCORE', k_dq(it.d), it.id) then
    return false
  end
  local detail = 'in dq:' .. it.d .. ', its domain is ' .. job.domain
  if not REPAIR then return true, false, detail end
  if redis.call('ZREM', k_dq(it.d), it.id) == 1 then lane_ready(job.lane, -1) end
  if #places_of(job) == 0 then put_ready(job) end
  refile(it.d)
  refile(job.domain)
  return true, true, detail .. ': moved'
end

local PLACE_KEYS = {
  delayed = function() return K.DELAYED end,
  inflight = function() return K.INFLIGHT end,
  dead = function() return K.DEAD end,
  dq = function(it) return k_dq(it.d) end,
  ddead = function(it) return k_ddead(it.d) end,
}

function CHECKS.id_without_job(it)
  local key_of = PLACE_KEYS[it.place]
  if not key_of then return false end
  local key = key_of(it)
  if redis.call('EXISTS', k_job(it.id)) == 1 or not redis.call('ZSCORE', key, it.id) then
    return false
  end
  if not REPAIR then return true, false, 'in ' .. it.place end
  if it.place == 'inflight' then
    reap_lost(it.id)
  else
    redis.call('ZREM', key, it.id)
    if it.place == 'dq' then refile(it.d) end
  end
  return true, true, 'removed from ' .. it.place
end

-- Whether no job moved since the scan: the counters, the last job id and token are still
-- `moves` (audit.py: _moves; a scan whose start and end differed sends no such check).
local function still(moves)
  if type(moves) ~= 'table' then return false end
  local m = redis.call('HMGET', K.META, 'seq', 'token')
  if (m[1] or '') ~= moves['@seq'] or (m[2] or '') ~= moves['@token'] then return false end
  local flat = redis.call('HGETALL', K.STATS)
  local n = 0
  for i = 1, #flat, 2 do
    if moves[flat[i]] ~= flat[i + 1] then return false end
    n = n + 1
  end
  for _ in pairs(moves) do n = n - 1 end
  return n == -2  -- moves holds the stats fields and the two of meta
end

-- A lane's ready counter against the ready jobs the scan counted (exp), on a queue where no
-- job moved since the scan (whose ready queues are read one by one).
function CHECKS.lane_ready_count(it)
  local field = 'ready:' .. it.lane
  local now = tonumber(redis.call('HGET', K.STATS, field)) or 0
  if now ~= tonumber(it.obs) or now == tonumber(it.exp) or not still(it.moves) then
    return false
  end
  local detail = 'counter ' .. now .. ', ready jobs ' .. it.exp
  if REPAIR then redis.call('HSET', K.STATS, field, tonumber(it.exp)) end
  return true, REPAIR, detail
end

function CHECKS.lease_domain(it)
  local recorded = redis.call('HGET', K.LEASED, it.id)
  local leased = redis.call('ZSCORE', K.INFLIGHT, it.id)
  if recorded and not leased then
    if REPAIR then redis.call('HDEL', K.LEASED, it.id) end
    return true, REPAIR, 'lease record without a lease'
  end
  local job = leased and load_job(it.id)
  if job and recorded ~= job.domain then
    if REPAIR then redis.call('HSET', K.LEASED, it.id, job.domain) end
    return true, REPAIR, 'lease without its domain record'
  end
  return false
end

function CHECKS.inflight_count(it)
  local counted = tonumber(redis.call('HGET', k_dom(it.d), 'inflight')) or 0
  local actual = leases_of(it.d)
  if counted == actual then return false end
  local detail = 'counter ' .. counted .. ', leases ' .. actual
  if not REPAIR then return true, false, detail end
  redis.call('HSET', k_dom(it.d), 'inflight', actual)
  refile(it.d)
  return true, true, detail .. ': set to ' .. actual
end

-- Delayed jobs per domain and per lane, counted here once per call when the delayed set is
-- at most EXACT_DELAYED jobs (nil beyond: a pass would hold Redis too long).
local EXACT_DELAYED = 20000
local DELAYED = nil
local function delayed_counts()
  if DELAYED == nil then
    DELAYED = false
    if redis.call('ZCARD', K.DELAYED) <= EXACT_DELAYED then
      DELAYED = {domain = {}, lane = {}}
      for _, id in ipairs(redis.call('ZRANGE', K.DELAYED, 0, -1)) do
        local job = load_job(id)
        if job then
          DELAYED.domain[job.domain] = (DELAYED.domain[job.domain] or 0) + 1
          DELAYED.lane[job.lane] = (DELAYED.lane[job.lane] or 0) + 1
        end
      end
    end
  end
  return DELAYED
end

-- A delayed counter against the delayed jobs: counted here when the set is small enough;
-- else the scan's count `exp`, taken only while the counter still reads what the scan saw
-- (`obs`): best effort on a busy queue (a job in and another out between the scan's reads
-- would look the same).
local function delayed_fix(key, field, kind, name, it)
  local now = tonumber(redis.call('HGET', key, field)) or 0
  local counts = delayed_counts()
  local actual
  if counts then
    actual = counts[kind][name] or 0
  elseif now == tonumber(it.obs) then
    actual = tonumber(it.exp)
  else
    return false
  end
  if now == actual then return false end
  local detail = 'counter ' .. now .. ', delayed jobs ' .. actual
  if REPAIR then redis.call('HSET', key, field, actual) end
  return true, REPAIR, detail
end

function CHECKS.delayed_count(it)
  return delayed_fix(k_dom(it.d), 'delayed', 'domain', it.d, it)
end

function CHECKS.lane_delayed_count(it)
  return delayed_fix(K.STATS, 'delayed:' .. it.lane, 'lane', it.lane, it)
end

function CHECKS.stranded_domain(it)
  local d = it.d
  if redis.call('ZCARD', k_dq(d)) == 0 or redis.call('ZSCORE', K.READY, d)
      or redis.call('ZSCORE', K.WAIT, d) then
    return false
  end
  local f = redis.call('HMGET', k_dom(d), 'inflight', 'state', 'conc', 'alim', 'climit', 'done')
  local state = f[2] or 'closed'
  if state == 'retired' then
    if redis.call('SISMEMBER', K.RETIRING, d) == 1 then return false end
  else
    local leases = leases_of(d)
    if leases > 0 and leases >= domain_cap(f[3], state, f[4]) and (tonumber(f[1]) or 0) == leases then
      return false  -- at its cap: the next settle files it
    end
    if f[5] and (tonumber(f[6]) or 0) + leases >= tonumber(f[5])
        and (tonumber(f[1]) or 0) == leases then
      return false  -- at its crawl limit (domain_set-1.lua): parked until it moves
    end
  end
  local detail = 'state ' .. state .. ', inflight counter ' .. (f[1] or '0')
  if not REPAIR then return true, false, detail end
  if state ~= 'retired' then redis.call('HSET', k_dom(d), 'inflight', leases_of(d)) end
  refile(d)
  return true, true, detail .. ': filed again'
end

function CHECKS.stale_fingerprint(it)
  if redis.call('HGET', K.UNIQUE, it.fp) ~= it.id then return false end
  local job = load_job(it.id)
  local pending = job ~= nil and not (job and job.done_at)
    and not redis.call('ZSCORE', K.DEAD, it.id)
  if pending then return false end
  if REPAIR then redis.call('HDEL', K.UNIQUE, it.fp) end
  return true, REPAIR, 'held by ' .. it.id .. ', which is no longer pending'
end

-- A pending unique job that does not hold its fingerprint. Held by another pending job: two
-- pending jobs of one URL, reported, not repaired (which one to drop is the operator's:
-- `scrapeq cancel`). Held by none: the job takes it again.
function CHECKS.duplicate_pending(it)
  local job = load_job(it.id)
  if not job or job.fp ~= it.fp or job.fpw or job.done_at or redis.call('ZSCORE', K.DEAD, it.id) then
    return false
  end
  local holder = redis.call('HGET', K.UNIQUE, it.fp)
  if holder == it.id then return false end
  local other = holder and load_job(holder)
  if other and not other.done_at and not redis.call('ZSCORE', K.DEAD, holder) then
    return true, false, 'a second pending job of fingerprint ' .. it.fp .. ', held by '
      .. holder .. ': cancel one of them'
  end
  local detail = 'fingerprint ' .. it.fp .. ' held by no pending job'
  if not REPAIR then return true, false, detail end
  redis.call('HSET', K.UNIQUE, it.fp, it.id)
  return true, true, detail .. ': taken again'
end

-- Counted again here (every bucket of the registry).
function CHECKS.domain_count(it)
  local n, used, listed = 0, {}, registry_buckets()
  local index_ok = true
  for b = 0, REGISTRY_BUCKETS - 1 do
    local len = redis.call('HLEN', P .. 'reg:' .. b)
    n = n + len
    if len > 0 then used[#used + 1] = b end
    if (len > 0) ~= (listed[b] == true) then index_ok = false end
  end
  local now = tonumber(redis.call('GET', K.DCOUNT)) or 0
  if now == n and index_ok then return false end
  local detail = 'counter ' .. now .. ', domains ' .. n
  if not index_ok then detail = detail .. '; the index of non-empty buckets (regb) is off' end
  if REPAIR then
    if n > 0 then redis.call('SET', K.DCOUNT, n) else redis.call('DEL', K.DCOUNT) end
    redis.call('DEL', K.REGB)
    if #used > 0 then redis.call('SADD', K.REGB, unpack(used)) end
  end
  return true, REPAIR, detail
end

function CHECKS.open_set(it)
  local state = redis.call('HGET', k_dom(it.d), 'state') or 'closed'
  local is_open = state == 'open' or state == 'half_open'
  local listed = redis.call('SISMEMBER', K.OPEN, it.d) == 1
  if is_open == listed then return false end
  if REPAIR then
    if is_open then redis.call('SADD', K.OPEN, it.d) else redis.call('SREM', K.OPEN, it.d) end
  end
  return true, REPAIR, 'breaker ' .. state .. (listed and ', in' or ', not in')
    .. ' the set of open breakers'
end

local out = {}
for i, it in ipairs(ARG.items) do
  local check = CHECKS[it.k]
  local confirmed, repaired, detail = false, false, ''
  if check then confirmed, repaired, detail = check(it) end
  out[i] = {confirmed and 1 or 0, repaired and 1 or 0, detail or ''}
end
return out
