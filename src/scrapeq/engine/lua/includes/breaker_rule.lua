--[[
  A domain's circuit breaker, the rule (issue 39): every transition of its state machine in
  one function. RULE.breaker_step(state, outcome, cfg, now) reads no key and writes none;
  breaker.lua (the settle's outcomes, the manual steering), domain.lua's refile (the end of a
  cooldown) and claim-1.lua (the half-open probe) read the domain's fields, call it and write
  what it answers, so tests/engine/test_breaker_rule.py EVALs it with states directly. Pure
  apart from the cooldown's jitter, one draw of the call's seeded random (backoff.lua).

  state (the domain hash's fields, domain.lua): state ('closed' | 'open' | 'half_open' |
    'retired'; nil = closed), fails (consecutive failures), win (last outcomes, '1' a
    failure, '0' a success, oldest first), trips (consecutive trips), open_until (ms),
    probe (the half-open probe's job id; '' none)
  outcome, by `ev`:
    'result'  a settle's breaker input: failed (true/false), job (its id), paused (dispatch
              is paused by the global guard: a failure then is not held against the site)
    'ended'   job `job` ended telling the breaker nothing (no input, reaped, lost)
    'due'     a refile looks at the domain: an open breaker whose cooldown is over goes
              half-open
    'claim'   a claim takes from the domain: the budget of jobs it may take (half-open: one
              probe); with `job`, that job was leased
    'pardon'  the global-fault guard paused dispatch: a trip in its window is undone (closed,
              one trip fewer), but a retirement
    'reset'   closed by hand (or un-retired by a replay: `why` says so); 'trip' opened by
              hand for `cool` ms (nil: the rule's cooldown), never retired
  cfg: fails, window, rate, min_calls (the trip thresholds), max_trips, cool_ms, cool_max_ms
  now: ms

  A field absent from `state` (not read by the caller) stays absent from state' unless the
  step sets it. Answers (state', effects); state' is what the hash holds after (the same table when
  nothing changed). effects (a table, possibly empty; never to be modified: the empty one and
  the spotless one are shared):
    write     the fields to store, in order (nil: none)
    open      {why, cool}: the breaker opened (emit a trip, SADD the open set, refile);
              guard = true when it tripped from closed (the global-fault guard looks)
    retire    why: retired after cfg.max_trips consecutive trips
    close     {event kind, why}: closed (SREM the open and retired sets)
    half_open true: the cooldown is over, one probe allowed
    budget    'claim': at most this many jobs (nil: the breaker sets no bound)
    probe     'claim': the jobs taken are probes (each leased goes through 'claim' with its
              `job`, which records it)
    spotless  a success on a closed, full, failure-free window: nothing to do, nor for the
              domain's later successes in the same call (until a breaker write)
]]
--@include backoff

-- Its helpers are RULE's too: no top-level local of their own (rules.lua).
RULE.BREAKER_NONE = {}  --@once
RULE.BREAKER_SPOTLESS = {spotless = true}  --@once

-- The jobs a claim may take from a domain whose breaker is in `state` (a string; nil:
-- closed): one probe when half-open, else no bound (nil). RULE.breaker_step's 'claim' in a
-- form that builds no table: claim-1.lua asks it for every domain it takes from.
function RULE.breaker_budget(state)
  if state == 'half_open' then return 1 end
  return nil
end

function RULE.breaker_trip(s, why, guard, cfg, now, cool)
  local trips = (tonumber(s.trips) or 0) + 1
  if not cool and trips >= cfg.max_trips then
    local new = {state = 'retired', fails = s.fails, win = s.win, trips = trips,
      open_until = s.open_until, probe = ''}
    return new, {write = {'state', 'retired', 'trips', trips, 'probe', ''},
      retire = string.format('%s; retired after %d consecutive trips', why, trips)}
  end
  cool = cool or RULE.backoff(cfg.cool_ms, cfg.cool_max_ms, trips, 'band')
  local new = {state = 'open', fails = 0, win = s.win, trips = trips, open_until = now + cool,
    probe = ''}
  return new, {write = {'state', 'open', 'open_until', now + cool, 'trips', trips, 'fails', 0,
    'probe', ''}, open = {why = why, cool = cool}, guard = guard or nil}
end

function RULE.breaker_close(kind, why)
  return {state = 'closed', fails = 0, win = '', trips = 0, open_until = 0, probe = ''},
    {write = {'state', 'closed', 'fails', 0, 'win', '', 'trips', 0, 'open_until', 0,
      'probe', ''}, close = {kind, why}}
end

-- A success on a closed breaker whose fields `fails` and `win` are as stored (strings, or
-- nil/false when absent): its window after it (and fails 0), or nil when it changes nothing
-- (a spotless window: full, no failure, none consecutive). breaker_closed_result's success,
-- in a form that builds no table: breaker.lua's settle asks it for every success.
function RULE.breaker_success(fails, win, window)
  win = win or ''
  if (tonumber(fails) or 0) == 0 and #win >= window and not string.find(win, '1', 1, true) then
    return nil
  end
  win = win .. '0'
  if #win > window then win = string.sub(win, -window) end
  return win
end

-- A settle's outcome on a closed breaker.
function RULE.breaker_closed_result(s, o, cfg, now)
  local failed = o.failed
  -- During a global pause failures are most likely ours: they are not held against the site.
  if failed and o.paused then return s, RULE.BREAKER_NONE end
  local win
  if failed then
    win = (s.win or '') .. '1'
    if #win > cfg.window then win = string.sub(win, -cfg.window) end
  else
    win = RULE.breaker_success(s.fails, s.win, cfg.window)
    if not win then
      return s, RULE.BREAKER_SPOTLESS  -- a success on a spotless window changes nothing
    end
  end
  local fails = failed and (tonumber(s.fails) or 0) + 1 or 0
  local new = {state = s.state, fails = fails, win = win, trips = s.trips,
    open_until = s.open_until, probe = s.probe}
  local effects = {write = {'fails', fails, 'win', win}}
  if not failed then return new, effects end
  local why
  local _, nfail = string.gsub(win, '1', '')
  if fails >= cfg.fails then
    why = string.format('%d consecutive failures', fails)
  elseif #win >= cfg.min_calls and nfail >= cfg.rate * #win then
    why = string.format('%d of the last %d calls failed', nfail, #win)
  else
    return new, effects
  end
  -- the window is written with the trip (which zeroes fails, but for a retirement)
  local opened, trip_effects = RULE.breaker_trip(new, why, true, cfg, now)
  local write = trip_effects.write
  if opened.state == 'retired' then write[#write + 1] = 'fails'; write[#write + 1] = fails end
  write[#write + 1] = 'win'
  write[#write + 1] = win
  return opened, trip_effects
end

function RULE.breaker_step(s, o, cfg, now)
  local state, ev = s.state or 'closed', o.ev
  if ev == 'result' then
    if state == 'closed' then return RULE.breaker_closed_result(s, o, cfg, now) end
    if state ~= 'half_open' or s.probe ~= o.job then return s, RULE.BREAKER_NONE end
    if o.failed then return RULE.breaker_trip(s, 'probe failed', false, cfg, now) end
    return RULE.breaker_close('recovered', 'probe succeeded: breaker closed')
  elseif ev == 'ended' then
    if s.probe ~= o.job then return s, RULE.BREAKER_NONE end
    local new = {state = s.state, fails = s.fails, win = s.win, trips = s.trips,
      open_until = s.open_until, probe = ''}
    return new, {write = {'probe', ''}}
  elseif ev == 'due' then
    if state ~= 'open' or now < (tonumber(s.open_until) or 0) then
      return s, RULE.BREAKER_NONE
    end
    local new = {state = 'half_open', fails = s.fails, win = s.win, trips = s.trips,
      open_until = s.open_until, probe = ''}
    return new, {write = {'state', 'half_open', 'probe', ''}, half_open = true}
  elseif ev == 'claim' then
    if not RULE.breaker_budget(state) then return s, RULE.BREAKER_NONE end
    if not o.job then return s, {budget = 1, probe = true} end
    local new = {state = s.state, fails = s.fails, win = s.win, trips = s.trips,
      open_until = s.open_until, probe = o.job}
    return new, {write = {'probe', o.job}, budget = 1, probe = true}
  elseif ev == 'pardon' then
    -- the global-fault guard (breaker.lua): the trip was most likely ours. A retirement
    -- stands: it took many trips, not one window.
    if state == 'retired' then return s, RULE.BREAKER_NONE end
    local trips = math.max((tonumber(s.trips) or 1) - 1, 0)
    return {state = 'closed', fails = 0, win = '', trips = trips, open_until = 0, probe = ''},
      {write = {'state', 'closed', 'fails', 0, 'win', '', 'trips', trips, 'open_until', 0,
        'probe', ''}}
  elseif ev == 'reset' then
    return RULE.breaker_close('reset', o.why or 'breaker reset by hand')
  elseif ev == 'trip' then
    -- by hand: never a retirement (one below cfg.max_trips at most)
    local trips = (tonumber(s.trips) or 0) + 1
    if trips >= cfg.max_trips then trips = math.max(cfg.max_trips - 1, 1) end
    local cool = o.cool or RULE.backoff(cfg.cool_ms, cfg.cool_max_ms, trips, 'band')
    return RULE.breaker_trip({trips = trips - 1, win = s.win}, 'tripped by hand', false, cfg,
      now, cool)
  end
  error('breaker_step: unknown outcome ' .. tostring(ev))
end
