--[[
  Exits (issue 23): the proxies a queue fetches through, as failure domains of their own.
  Depends on common.lua and domain.lua. scrapeq/engine/model/exits.py describes the pool;
  CFG.exits is it: {{id, tier}, ...}, tier an index, 0 the cheapest. With no pool (an empty
  list) nothing here runs and jobs carry no exit.

  Three places a failure can live, each with its own state:
  - the exit (sq:{Q}:exit:<id>, hash): dead when it fails for the queue as a whole, like a
    domain's breaker: `win` its last outcomes ('0' it carried an answer, '1' it failed
    itself: refused, its credentials refused; 't' a timeout, whose domain joins `tdom`);
    it trips on EXIT_FAILS proxy failures in a row, or when half of a window of at least
    EXIT_MIN outcomes failed with a proxy failure among them or timeouts from two domains
    (one slow site does not condemn its exit). Open for CFG.ex_cool_ms, doubling per
    consecutive trip up to CFG.ex_cool_max_ms, then one probe job at a time. Its fields:
      state closed|open|half_open, win, tdom, open_until, trips, probe, lu (ms last chosen),
      req, ok, bans, fails, timeouts, bytes, lat (ms summed over answers)
    sq:{Q}:exits:down (hash, K.EXITS_DOWN) holds id -> cooldown end for the exits not
    closed ('p<ms>' while a probe is out, until ms), so a claim learns which exits are
    usable with one read.
  - the (exit, domain) pair (sq:{Q}:dexit:<d>, hash, fields b:<id> = '<until>:<strikes>'):
    a ban seen through that exit benches the pair for CFG.ex_ban_ms, doubling while its bans
    repeat (up to CFG.ex_ban_max_ms); an answer through it clears the strikes. A ban is not the
    domain's failure unless no usable exit is left for the domain (then it is the site: the
    breaker is charged, settle-1.lua).
  - the domain's tier (same hash: tier, tier_at): a domain starts at the cheapest tier; when no
    exit of its tier is usable for it, it moves to the nearest tier that has one (up first);
    after CFG.ex_quiet_ms at a higher tier it tries the cheaper one again when that one has
    a usable exit. Also u:<id> (ms the exit was last chosen for it: least recently used
    first), r:<tier> requests and y:<tier> bytes per tier (cost, attributed); with session =
    sticky, s (the session's exit) and sj (its cookie jar: jar.lua).
]]
--@include tally
--@include jar
--@include backoff

local EX = {FAILS = 3, MIN = 4, WINDOW = 10}

-- The pool's tier of each id, and the highest tier index (built once per call).
function EX.pool()
  if EX.tier_of == nil then
    EX.tier_of, EX.top = {}, -1
    for _, e in ipairs(CFG.exits) do
      EX.tier_of[e[1]] = e[2]
      if e[2] > EX.top then EX.top = e[2] end
    end
  end
  return EX.tier_of
end

-- The exits that are not closed: id -> value of K.EXITS_DOWN (read once per call).
function EX.down()
  if EX.down_map == nil then
    EX.down_map = {}
    local flat = redis.call('HGETALL', K.EXITS_DOWN)
    for i = 1, #flat, 2 do EX.down_map[flat[i]] = flat[i + 1] end
  end
  return EX.down_map
end

-- Whether exit `id` can carry a request now: true (closed), 'probe' (its cooldown or its
-- probe's deadline passed: one probe may go), or false and when that may change (ms).
function EX.state(id)
  local v = EX.down()[id]
  if v == nil then return true end
  local at = tonumber(string.match(v, '^p?(%d+)$')) or 0
  if at <= NOW then return 'probe' end
  return false, at
end

-- When every exit of the pool is down (our fault, not any site's): the ms the first comes
-- back; nil otherwise (or with no pool).
function EX.all_down()
  if #CFG.exits == 0 then return nil end
  local first = nil
  for _, e in ipairs(CFG.exits) do
    local usable, at = EX.state(e[1])
    if usable then return nil end
    if first == nil or at < first then first = at end
  end
  return first
end

function EX.bench_of(v)
  if not v then return 0, 0 end
  local u, s = string.match(v, '^(%d+):(%d+)$')
  return tonumber(u) or 0, tonumber(s) or 0
end

-- The exits usable for domain d (fields f: its dexit hash as a map), by tier:
-- {[tier] = {{id, lu, probe}, ...}}, and the earliest ms an unusable one may come back.
function EX.usable(f)
  EX.pool()
  local by_tier, earliest = {}, nil
  for i, e in ipairs(CFG.exits) do
    local id, t = e[1], e[2]
    local ok, at = EX.state(id)
    local until_ = EX.bench_of(f['b:' .. id])
    if ok and until_ > NOW then ok, at = false, until_ end
    if ok then
      local list = by_tier[t]
      if not list then list = {}; by_tier[t] = list end
      list[#list + 1] = {id = id, lu = tonumber(f['u:' .. id]) or 0, probe = ok == 'probe', i = i}
    elseif at and (earliest == nil or at < earliest) then
      earliest = at
    end
  end
  return by_tier, earliest
end

function EX.hash_map(key)
  local flat = redis.call('HGETALL', key)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

-- The tier domain d fetches at now, and its usable exits there (least recently used first);
-- moves the domain between tiers (an event each time). nil and the ms it may change when no
-- exit at all is usable for it.
function EX.plan(d)
  local dk = k_dexit(d)
  local f = EX.hash_map(dk)
  local by_tier, earliest = EX.usable(f)
  local tier = tonumber(f.tier) or 0
  local moved = nil
  if tier > 0 and by_tier[tier - 1] and NOW - (tonumber(f.tier_at) or 0) >= CFG.ex_quiet_ms then
    moved = tier - 1  -- quiet long enough up there: the cheaper tier again
  elseif not by_tier[tier] then
    for t = tier + 1, EX.top do
      if by_tier[t] then moved = t; break end
    end
    if moved == nil then
      for t = tier - 1, 0, -1 do
        if by_tier[t] then moved = t; break end
      end
    end
    if moved == nil then return nil, earliest end
  end
  if moved ~= nil and moved ~= tier then
    redis.call('HSET', dk, 'tier', moved, 'tier_at', NOW)
    emit(moved > tier and 'tier_up' or 'tier_down', d,
      string.format('exits: tier %d -> %d', tier, moved))
    tier = moved
  end
  local list = by_tier[tier]
  table.sort(list, function(a, b)
    if a.lu ~= b.lu then return a.lu < b.lu end
    return a.i < b.i
  end)
  local plan = {tier = tier, list = list, next = 1, key = dk}
  if CFG.sticky then EX.session(plan, f) end
  return plan
end

-- session = sticky: the domain's jobs all go through its session exit (field `s`) with its
-- cookie jar (`sj`; each attempt's changes to it are merged in by EX.settle_job). When that exit
-- is not usable for it (banned, down, another tier now), the least recently used one starts a
-- new session with an empty jar.
function EX.session(plan, f)
  local chosen = nil
  for _, e in ipairs(plan.list) do
    if e.id == f.s then chosen = e end
  end
  if chosen then
    plan.jar = f.sj
  else
    chosen = plan.list[1]
    redis.call('HSET', plan.key, 's', chosen.id)
    redis.call('HDEL', plan.key, 'sj')
  end
  plan.list = {chosen}
end

-- Choose the exit of the next job of a plan (round robin over its list, least recently used
-- first; a probe exit carries one job, then leaves the list). Records the choice.
function EX.choose(plan, job_id)
  local list = plan.list
  if #list == 0 then return nil end
  if plan.next > #list then plan.next = 1 end
  local e = list[plan.next]
  if e.probe then
    table.remove(list, plan.next)
    redis.call('HSET', K.EXITS_DOWN, e.id, 'p' .. (NOW + CFG.lease_ms))
    EX.forget(e.id)
    redis.call('HSET', k_exit(e.id), 'state', 'half_open', 'probe', job_id)
    EX.down_map[e.id] = 'p' .. (NOW + CFG.lease_ms)
  else
    plan.next = plan.next + 1
  end
  if EX.first(plan.key, e.id) then redis.call('HSET', plan.key, 'u:' .. e.id, NOW) end
  if EX.first(e.id, 'lu') then redis.call('HSET', k_exit(e.id), 'lu', NOW) end
  return e.id
end

-- Whether (a, b) is met for the first time in this call: EX.choose stamps a pair's and an
-- exit's last use (`u:<id>`, `lu`) once per call; it is their only writer and NOW is the
-- call's, so a second write in the same call would change nothing.
EX.stamped = {}
function EX.first(a, b)
  local k = a .. '\0' .. b
  if EX.stamped[k] then return false end
  EX.stamped[k] = true
  return true
end

-- The breaker fields of exit `id` (state, win, tdom, trips, probe: HMGET's answer), read once
-- per call and kept as this call writes them (EX.settle); a write of another of them
-- (EX.forget) makes the next use read them again.
EX.brk = {}
function EX.breaker(id)
  local f = EX.brk[id]
  if f == nil then
    f = redis.call('HMGET', k_exit(id), 'state', 'win', 'tdom', 'trips', 'probe')
    EX.brk[id] = f
  end
  return f
end

function EX.forget(id)
  EX.brk[id] = nil
end

-- Cooldown of an exit's n-th consecutive trip: base * 2^(n-1), capped, +-20% jitter.
function EX.exit_cooldown(trips)
  return RULE.backoff(CFG.ex_cool_ms, CFG.ex_cool_max_ms, trips, 'band')
end

function EX.open_exit(id, trips, why)
  local cool = EX.exit_cooldown(trips)
  EX.forget(id)
  redis.call('HSET', k_exit(id), 'state', 'open', 'open_until', NOW + cool, 'trips', trips,
    'probe', '')
  redis.call('HSET', K.EXITS_DOWN, id, NOW + cool)
  emit('exit_down', '', string.format('exit %s: %s; resting %.1f s (trip %d)', id, why,
    cool / 1000, trips), {'exit', id})
  stat('exit_trips')
end

-- Whether an exit's window says it is dead: EX.FAILS proxy failures in a row, or half of at
-- least EX.MIN outcomes failed with a proxy failure among them or timeouts of two domains.
function EX.window_trips(win, tdom)
  local tail = string.sub(win, -EX.FAILS)
  if #tail == EX.FAILS and not string.find(tail, '[^1]') then
    return string.format('%d proxy failures in a row', EX.FAILS)
  end
  if #win < EX.MIN then return nil end
  local _, proxy = string.gsub(win, '1', '')
  local _, timeouts = string.gsub(win, 't', '')
  if (proxy + timeouts) * 2 < #win then return nil end
  local doms, n = {}, 0
  for dom in string.gmatch(tdom or '', '%S+') do
    if not doms[dom] then doms[dom] = true; n = n + 1 end
  end
  if proxy == 0 and n < 2 then return nil end
  return string.format('%d of the last %d calls failed', proxy + timeouts, #win)
end

-- An attempt through exit `id` for domain d ended with `result` ('ok' an answer, 'ban' a ban
-- by the site, 'down' the exit failed itself, 'timeout', 'error' anything else the site did),
-- `bytes` downloaded and `latency` ms. Counts it (the exit's and the domain's tier's), moves
-- the exit's breaker and the pair's bench. Returns true when the domain has no usable exit
-- left after a ban (the caller charges its breaker: it is the site), else nil; and whether
-- the attempt was the exit's half-open probe and failed (the exit rests again).
function EX.settle(id, d, result, bytes, latency, job_id)
  local ek, dk = k_exit(id), k_dexit(d)
  local t = EX.pool()[id]
  bytes = bytes or 0
  local counter = ({ok = 'ok', ban = 'bans', down = 'fails', timeout = 'timeouts',
    error = 'errors'})[result]
  TALLY.add(ek, 'req', 1)
  TALLY.add(ek, counter, 1)
  if bytes > 0 then TALLY.add(ek, 'bytes', bytes) end
  if latency and result ~= 'down' then TALLY.add(ek, 'lat', latency) end
  if t ~= nil then
    TALLY.add(dk, 'r:' .. t, 1)
    if bytes > 0 then TALLY.add(dk, 'y:' .. t, bytes) end
  end
  -- the exit's breaker
  local probe_failed = false
  local f = EX.breaker(id)
  local state = f[1] or 'closed'
  local mark = (result == 'down' and '1') or (result == 'timeout' and 't') or '0'
  if state == 'half_open' and f[5] == job_id then
    if mark == '0' then
      EX.forget(id)
      redis.call('HSET', ek, 'state', 'closed', 'win', '', 'tdom', '', 'trips', 0, 'probe', '',
        'open_until', 0)
      redis.call('HDEL', K.EXITS_DOWN, id)
      emit('exit_up', '', string.format('exit %s: probe answered; back in rotation', id),
        {'exit', id})
    else
      EX.open_exit(id, (tonumber(f[4]) or 0) + 1, 'probe failed')
      probe_failed = true
    end
  elseif state == 'closed' then
    local win = string.sub((f[2] or '') .. mark, -EX.WINDOW)
    local tdom = f[3] or ''
    if mark == 't' then
      tdom = string.sub(tdom .. ' ' .. d, -400)
    end
    local why = EX.window_trips(win, tdom)
    if why then
      redis.call('HSET', ek, 'win', '', 'tdom', '')
      EX.open_exit(id, (tonumber(f[4]) or 0) + 1, why)
    elseif win ~= f[2] or tdom ~= f[3] then  -- a window full of answers stays as it is
      redis.call('HSET', ek, 'win', win, 'tdom', tdom)
      f[2], f[3] = win, tdom
    end
  end
  return EX.pair_settle(id, d, result), probe_failed
end

-- The (exit, domain) pair after an attempt through exit `id` for domain d (EX.settle): a ban
-- benches it, an answer clears its strikes. True when a ban left d no usable exit, else nil.
function EX.pair_settle(id, d, result)
  local dk, field = k_dexit(d), 'b:' .. id
  if result == 'ban' then
    local _, strikes = EX.bench_of(redis.call('HGET', dk, field))
    strikes = strikes + 1
    local rest = RULE.backoff(CFG.ex_ban_ms, CFG.ex_ban_max_ms, strikes)
    redis.call('HSET', dk, field, (NOW + rest) .. ':' .. strikes)
    EX.unbenched[dk .. '\0' .. field] = nil
    if redis.call('HGET', dk, 's') == id then redis.call('HDEL', dk, 's', 'sj') end  -- rotate
    emit('exit_benched', d, string.format('exit %s banned; benched for %.1f s (ban %d)', id,
      rest / 1000, strikes), {'exit', id})
    stat('exit_bans')
    EX.down_map = nil
    local by_tier = EX.usable(EX.hash_map(dk))
    if next(by_tier) == nil then return true end
  elseif result == 'ok' then
    -- the pair's strikes cleared: looked up once per call while it is known to have none
    local known = dk .. '\0' .. field
    if not EX.unbenched[known] then
      if redis.call('HEXISTS', dk, field) == 1 then redis.call('HDEL', dk, field) end
      EX.unbenched[known] = true
    end
  end
  return nil
end

-- Pairs (dexit key .. '\0' .. 'b:<id>') known to have no bench field in this call: only a
-- ban (EX.pair_settle) writes one; deleting one (auto.lua) keeps it so.
EX.unbenched = {}

-- settle-1.lua: a settled job that was claimed through an exit (job.exit). `it`: its settle
-- item (exit, bytes, latency; jar: its changes to the session's jar, jar.lua); a ban that
-- leaves the domain no usable exit sets it.domain_failed (the breaker is charged: it is the
-- site). A failed probe of a resting exit is the exit's failure alone (issue 38 item 8): the
-- item becomes a give-back (answers true: a release that spends nothing of the job and tells
-- its domain nothing), so an outage of every exit dead-letters no job. The job forgets its
-- exit.
function EX.settle_job(job, it)
  local id = job.exit
  job.exit, job.jar = nil, nil
  local dk = k_dexit(job.domain)
  if it.jar ~= nil and CFG.sticky and redis.call('HGET', dk, 's') == id then
    -- the attempt's changes, merged per cookie into the jar as it is now (not as the job's
    -- claim found it: another attempt may have changed it since)
    local jar = JAR.merge(redis.call('HGET', dk, 'sj'), it.jar, NOW / 1000)
    if jar then redis.call('HSET', dk, 'sj', jar) else redis.call('HDEL', dk, 'sj') end
  end
  if it.exit == nil then
    -- no request was made: a probe it carried is given back
    if redis.call('HGET', k_exit(id), 'probe') == job.id then
      EX.forget(id)
      redis.call('HSET', k_exit(id), 'probe', '')
      redis.call('HSET', K.EXITS_DOWN, id, NOW)
    end
    return false
  end
  local charged, probe_failed = EX.settle(id, job.domain, it.exit, it.bytes, it.latency, job.id)
  if probe_failed then
    it.outcome, it.delay, it.backoff = 'release', 0, nil
    it.domain_failed, it.latency, it.overload, it.retry_after = nil, nil, nil, nil
    return true
  elseif charged then
    it.domain_failed = true
  end
  return false
end
