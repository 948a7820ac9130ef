--[[
  Domain scheduling: where a domain is filed (ready, waiting for a time, or parked until an ack).
  Depends on common.lua. Its circuit breaker is breaker.lua, whose rule (breaker_rule.lua)
  refile asks when an open breaker's cooldown ends.

  Domain hash sq:{Q}:domain:<d> fields:
    inflight     jobs claimed and not settled, but those whose download ended and whose
                 slot was given back then (downloaded-1.lua, slot_given_back)
    next         ms: earliest next request start (politeness delay, Retry-After)
    state        closed | open | half_open | retired (absent = closed)
    fails        consecutive failures (closed state)
    win          last outcomes, oldest first, '1' failure '0' success (at most CFG.window);
                 kept while the breaker is open (the outcomes that tripped it), cleared when
                 it closes
    open_until   ms: end of the current cooldown
    trips        consecutive trips (reset by a successful probe)
    probe        id of the half-open probe job
    delay, conc  per-domain overrides (ms between request starts, jobs in flight; conc
                 'auto': an adaptive limit, see adaptive.lua for its fields)
    delayed      jobs of the domain in the delayed zset
    done         jobs done since the domain was first seen (its count of jobs enqueued is
                 in the registry, registry.lua)
    dcur, dc, dp, db  dead-letter rate: current hour bucket, its count, the previous
                 bucket's count, baseline (moving average of completed hours): count_hourly
    fcur, fc, fp, fb  the same for failures charged to the breaker (breaker.lua:
                 note_failure), which the failure-spike alarm reads
    errs         JSON array of the last failures charged to the breaker, oldest first:
                 [{at, kind, msg, id}] (breaker.lua: note_failure)
]]
--@include breaker_rule

-- Whether a domain's limit adapts (adaptive.lua): its `conc` field says 'auto', or it has
-- none and the queue's domain_concurrency is auto.
local function adaptive_on(conc_override)
  if conc_override == 'auto' then return true end
  return not conc_override and CFG.auto == true
end

-- The limit an adaptive domain starts at: the queue's default, within the bounds.
local function adaptive_start()
  return math.min(math.max(CFG.conc, CFG.conc_min or 1), CFG.conc_max or CFG.conc)
end

-- Whether a ready job of priority `score` is urgent: at least as urgent as a fresh job of
-- the most urgent lane (CFG.urgent_ms, that lane's offset; null with one lane: none is).
-- An urgent enqueue wakes the workers (enqueue.lua); an urgent head starts a domain with no
-- learned limit at CFG.urgent_conc (claim-1.lua: take_run).
local function is_urgent(score)
  local off = CFG.urgent_ms
  return off ~= nil and off ~= cjson.null and tonumber(score) <= NOW + off
end

-- The limit an adaptive domain with no learned limit starts at for urgent work.
local function urgent_start()
  return math.min(math.max(CFG.urgent_conc, CFG.conc_min or 1), CFG.conc_max or CFG.urgent_conc)
end

-- `alim`: the domain's adaptive limit (its field), used when its limit adapts. `state`: its
-- breaker's, whose rule may bound it (half-open: its one probe, breaker_rule.lua).
local function domain_cap(conc_override, state, alim)
  local probes = RULE.breaker_budget(state)
  if probes then return probes end
  if adaptive_on(conc_override) then
    local lim = tonumber(alim) or adaptive_start()
    return math.floor(math.min(math.max(lim, CFG.conc_min or 1), CFG.conc_max or lim))
  end
  return tonumber(conc_override) or CFG.conc
end

-- Give back n of domain d's inflight slots, clamped at 0 (a repaired store may count short).
local function free_slots(d, n)
  if redis.call('HINCRBY', k_dom(d), 'inflight', NUMTEXT.of(-n)) < 0 then
    redis.call('HSET', k_dom(d), 'inflight', 0)
  end
end

-- Whether a claimed job's domain slot was given back when its download ended, before its
-- settle (downloaded-1.lua): field `sf` holds the token of the lease whose slot it gave back,
-- so a mark left by an earlier lease never matches. Such a lease leaves inflight without
-- freeing a slot again (lease_held_slot: settle-1.lua, housekeeping.lua), and is not counted
-- in its domain's `inflight` (audit-1.lua: leases_of).
local function slot_given_back(job)
  return job.sf ~= nil and job.sf == job.token
end

-- A lease of `job` ends (settled, reaped, cancelled): whether it still held its domain's slot,
-- which the caller then frees; the give-back mark goes with the lease.
local function lease_held_slot(job)
  local held = not slot_given_back(job)
  job.sf = nil
  return held
end

-- Jobs that left inflight whose domain counter is not decremented yet: domain -> count.
-- settle-1.lua subtracts a batch's share once per domain; `refile`, the only reader of a
-- domain's `inflight` on the settle path, applies it first (clamped at 0, as item by item).
local INFLIGHT_LEFT = {}

-- A domain left with nothing queued or in flight and a closed breaker is noted idle now
-- (sq:{Q}:idle), for housekeeping to forget after CFG.domain_ttl_ms (forget_idle). `f`:
-- its inflight and state as refile read them. Only when its last job leaves: no cost on
-- the way of a busy domain.
local function note_idle(d, f)
  if (tonumber(CFG.domain_ttl_ms) or 0) <= 0 or (tonumber(f[1]) or 0) > 0
      or (f[3] or 'closed') ~= 'closed' then
    return
  end
  if (tonumber(redis.call('HGET', k_dom(d), 'delayed')) or 0) > 0 then return end
  redis.call('ZADD', K.IDLE, NOW, d)
end

-- File domain d where it belongs now. Returns true when it may dispatch.
-- `from_ready`: the caller knows d is not in domains:wait (it was just taken from ready).
-- `known`: the caller's current values of the fields read here (inflight, next, state,
-- open_until, conc, alim, climit, done), saving the HMGET.
local function refile(d, from_ready, known)
  local dk = k_dom(d)
  local left = INFLIGHT_LEFT[d]
  if left then
    INFLIGHT_LEFT[d] = nil
    free_slots(d, left)
    known = nil
  end
  local f = known or redis.call('HMGET', dk, 'inflight', 'next', 'state', 'open_until', 'conc',
    'alim', 'climit', 'done')
  local state = f[3] or 'closed'
  if state == 'retired' then
    redis.call('ZREM', K.READY, d)
    redis.call('ZREM', K.WAIT, d)
    -- a job that came back (released) after the drain must be drained too
    if redis.call('ZCARD', k_dq(d)) > 0 then redis.call('SADD', K.RETIRING, d) end
    return false
  end
  local head = redis.call('ZRANGE', k_dq(d), 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZREM', K.READY, d)
    redis.call('ZREM', K.WAIT, d)
    note_idle(d, f)
    return false
  end
  if state == 'open' then  -- the breaker rule says whether its cooldown is over
    local new, e = RULE.breaker_step({state = state, open_until = f[4]}, {ev = 'due'}, CFG, NOW)
    if not e.half_open then
      redis.call('ZREM', K.READY, d)
      redis.call('ZADD', K.WAIT, tonumber(f[4]) or 0, d)
      return false
    end
    state = new.state
    redis.call('HSET', dk, unpack(e.write))
    emit('half_open', d, 'cooldown over: one probe allowed')
  end
  -- at its cap, or at its crawl limit (`climit`, domain_set-1.lua: its jobs done and in
  -- flight reach it): parked until a lease ends (or the limit moves)
  local inflight, limit = tonumber(f[1]) or 0, tonumber(f[7])
  if inflight >= domain_cap(f[5], state, f[6])
      or (limit ~= nil and (tonumber(f[8]) or 0) + inflight >= limit) then
    redis.call('ZREM', K.READY, d)
    redis.call('ZREM', K.WAIT, d)
    return false
  end
  local nxt = tonumber(f[2]) or 0
  if nxt > NOW then
    redis.call('ZREM', K.READY, d)
    redis.call('ZADD', K.WAIT, nxt, d)
    return false
  end
  redis.call('ZADD', K.READY, head[2], d)
  if not from_ready then redis.call('ZREM', K.WAIT, d) end
  return true
end

-- Job `id` of domain d ended telling its breaker nothing (settled with no breaker input,
-- reaped, lost): were it the half-open probe, the next claim may send another.
local function probe_ended(d, id)
  local dk = k_dom(d)
  local _, e = RULE.breaker_step({probe = redis.call('HGET', dk, 'probe')},
    {ev = 'ended', job = id}, CFG, NOW)
  if e.write then redis.call('HSET', dk, unpack(e.write)) end
end

local function paused_until()
  local p = tonumber(redis.call('HGET', K.META, 'paused_until')) or 0
  if p > NOW then return p end
  return nil
end

local HOUR_MS = 3600000  --@once

-- Count one event of domain d per hour in its fields <p>cur (the current hour), <p>c (its
-- count), <p>p (the previous hour's), <p>b (the baseline: a moving average of whole hours).
local function count_hourly(d, p)
  local dk = k_dom(d)
  local f = redis.call('HMGET', dk, p .. 'cur', p .. 'c', p .. 'p', p .. 'b')
  local bucket = math.floor(NOW / HOUR_MS)
  local cur, c, prev, base = tonumber(f[1]) or bucket, tonumber(f[2]) or 0,
    tonumber(f[3]) or 0, tonumber(f[4]) or 0
  while cur < bucket do
    base = base * 0.8 + c * 0.2
    prev = c
    c = 0
    cur = cur + 1
    if bucket - cur > 48 then cur = bucket; prev = 0 end
  end
  redis.call('HSET', dk, p .. 'cur', cur, p .. 'c', c + 1, p .. 'p', prev, p .. 'b', base)
end

-- count_hourly's events in the last hour: this hour's count plus the previous hour's share
-- of the last 60 minutes. `cur`, `c`, `prev`: the fields as stored (strings or nil).
local function last_hour(cur, c, prev)
  local bucket = math.floor(NOW / HOUR_MS)
  local frac = (NOW % HOUR_MS) / HOUR_MS
  cur = tonumber(cur)
  if cur == bucket then
    return (tonumber(c) or 0) + (tonumber(prev) or 0) * (1 - frac)
  elseif cur == bucket - 1 then
    return (tonumber(c) or 0) * (1 - frac)
  end
  return 0
end
