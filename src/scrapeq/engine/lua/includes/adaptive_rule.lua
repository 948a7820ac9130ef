--[[
  Adaptive politeness (domain_concurrency = auto), the rule: a domain's concurrency limit and
  the interval between its request starts, learned from the outcomes settle already sees.
  Pure: adaptive_step(state, sample) reads no key and writes none; adaptive.lua reads the
  state from the domain's hash and writes it back, so tests/engine/test_adaptive_step.py EVALs the
  rule with states and samples directly. Depends on nothing. docs/DESIGN.md, "Adaptive
  politeness", says why it works this way.

  The state: each field a number or nil, stored in the domain's hash under the field that
  ADAPTIVE_FIELDS names (in brackets; scrapeq/engine/lua/wire.py documents them too):
    limit [alim]  the concurrency limit (a float; claims take floor(alim), within the bounds)
    interval [aivl]  ms between request starts once the limit is at its minimum (0: none)
    avg [alat]    current latency, ms: the moving average (EWMA) of answered requests'
                  latencies, but those of requests claimed before the last decrease (cut_at)
    base [abase]  no-load latency, ms: avg's decaying minimum (of the average, not of single
                  samples: the fastest of a few hundred answers is far below a site's usual)
                  until the site first refuses, then long_avg's minimum (no longer rising on
                  its own); at a limit of one request it is at least avg / GOOD (one request
                  queues behind none)
    long_avg [alt]  the long average (weight LONG) of the latencies, kept from the first
                  overload cut on (unset before it)
    cut_at [acut]  ms: when the rate was last lowered (one decrease per window: only outcomes
                  of requests claimed after it lower it again)
    ok_at [aok]   ms: the last answered request (a site that answered lately is alive)
    sec [asb], sec_n [asn], prev_n [asp]  answers per second: the second (floor(ms / 1000))
                  of sec_n, the answers counted in it, and in the second before it (0: none)
    threshold [ath]  slow-start threshold: the limit a decrease left (+1 an answer below it)
    refused [abad]  ms: the interval last refused (at least KEEP x the one refused before it)
    cap [acap]    the ceiling: the limit an overload signal cut, less one, and one less for
                  each request of that window refused after it; the limit does not grow past
                  it until PROBE_N answers pass without a decrease (then it is forgotten)
    count [acnt]  answers since the last decrease, or since the streak began when that is later
    streak_at [asa]  ms: when the current streak of answers began (after a silence longer
                  than 1 s and than twice the interval)
    inflight      the domain's jobs in flight (read, never written here: domain.lua keeps it)
  The sample (one settled attempt): now (ms), lat (ms the fetch took), overload (true: the
  client's overload signal), outcome (the settle item's), failed (the breaker input: true,
  false or nil), claimed (ms, the job's claim), min and max (the limit's bounds).

  AIMD on the limit: an answer whose latency average stays near the baseline (avg <=
  base * GOOD + SLACK), while the limit is in use (in slow start: half of it), raises it
  (+1 an answer up to the slow-start threshold, then +1/limit x the share of the way from
  base to the bound still left; each step scaled by min(1, (avg / RAMP_MS)^2); never past
  the ceiling cap); latency past base * BAD + SLACK cuts it (x LAT_CUT); an overload
  signal (429, 503, timeout, reset) halves it (x CUT) and sets the ceiling, or, answered as
  fast as a page (a rate limiter at the door), drops it to the minimum and starts the
  interval. At the minimum, an overload lengthens the interval (x IVL_UP the spacing, no
  shorter than IVL_UP x the ms a request the site let through since the last decrease or the
  streak's start (RATE_MS of them at least; else in the last whole second, when the streak
  covered it), up to FLOOR_MS); good answers shorten it (BACK of the way to NEAR x the
  interval last refused, then x IVL_DOWN an answer), and drop it under avg.

  Slow down before condemning: an overload signal is excused (kept from the breaker, and a
  retry becomes a throttle: no attempt spent, the job queued again at once, paced by the
  domain) while the domain answered within RECENT_MS and its rate is not near the floor
  (limit at its minimum and interval within one IVL_UP step of FLOOR_MS). A site that never
  answers gets no excuse: it trips exactly as before.

  RULE.adaptive_charges(state, sample) (issue 39): whether one download's sample charges its
  domain, so that its slot is not given back before its settle (downloaded-1.lua): its
  breaker input is a failure (failed = true), it signals overload, or, on an adaptive domain
  (state; nil: not adaptive), its step would lower the rate (the latency cut, a wider
  interval). Pure, and only asked: the settle records the sample, once.
]]
--@include rules

-- The state's fields in the domain's hash, in the order they are written.
local ADAPTIVE_FIELDS = {{'limit', 'alim'}, {'interval', 'aivl'}, {'base', 'abase'},  --@once
  {'avg', 'alat'}, {'cut_at', 'acut'}, {'ok_at', 'aok'}, {'sec', 'asb'}, {'sec_n', 'asn'},
  {'prev_n', 'asp'}, {'threshold', 'ath'}, {'refused', 'abad'}, {'cap', 'acap'},
  {'count', 'acnt'}, {'streak_at', 'asa'}, {'long_avg', 'alt'}}

-- The rule is built in a closure: its constants, its helpers and the state of the step
-- being computed are locals of the closure (its helpers share them as upvalues, as fast as
-- locals), not of the script, whose top level Lua 5.1 allows 200. adaptive_step sets every
-- one of them from its arguments before it runs, so no call sees another's (a function
-- library makes it once: engine/lua/library.py).
local adaptive_step = (function()  --@once
  local GOOD, BAD, SLACK = 1.5, 2.0, 10
  local EWMA, LONG, DRIFT = 0.2, 0.02, 0.01
  local CUT, LAT_CUT = 0.5, 0.75
  local IVL_START, IVL_UP, IVL_DOWN = 100, 1.5, 0.998
  local IVL_NEAR, IVL_BACK, IVL_KEEP = 1.2, 0.1, 1.0
  local FLOOR_MS, RECENT_MS, RAMP_MS, PROBE_N, RATE_MS = 4000, 15000, 25, 1000, 500

  -- the state (ADAPTIVE_FIELDS' names) and the sample (x: now, lat, lo = min, hi = max)
  local limit, interval, base, avg, cut_at, ok_at, sec, sec_n, prev_n
  local threshold, refused, cap, count, streak_at, long_avg, inflight
  local now, lat, lo, hi

  -- The latency average, baseline and long average after an answer of `lat` ms (`fresh`:
  -- claimed after the last decrease took effect; `alone`: and at a limit of one, nothing
  -- else in flight). The average leaves out answers of requests claimed before the last
  -- decrease: they queued behind a load we have left. Until the site first refused
  -- (long_avg unset), the baseline is the average's decaying minimum (DRIFT an answer: the
  -- minimum of a noisy average sinks far below the site's usual latency); from then on, the
  -- long average's minimum: no longer rising on its own, since past the site's capacity the
  -- latency we see is our own queue, and a baseline that followed it let the limit grow to
  -- the refusals.
  local function learn_latency(fresh, alone)
    if fresh or not avg then avg = avg and (avg + (lat - avg) * EWMA) or lat end
    if long_avg then long_avg = long_avg + (lat - long_avg) * LONG end
    if not base then
      base = avg
    elseif long_avg then
      base = math.min(base, long_avg)
    else
      base = math.min(avg, base * (1 + DRIFT))
    end
    if alone then
      -- a request alone in flight at a limit of one, claimed at it, queued behind none of
      -- ours: what it takes is the no-load latency, so the baseline is no further below it
      -- than GOOD allows (a site whose latency varies widely got a baseline from a fast
      -- first answer or a dip of the average, and was held at one request for as long as
      -- the drift took to catch up: 30 s for a 400 ms shop in the incident's fleet). Its own
      -- latency when lower than the average: the average may still hold answers that queued.
      base = math.max(base, math.min(avg, lat) / GOOD)
      long_avg = long_avg and math.max(long_avg, base)
    end
  end

  -- At the minimum limit: space the starts IVL_UP x wider than now, and no closer than
  -- IVL_UP x the ms a request the site let through lately (its rate limit, when it has
  -- one); the interval refused is no shorter than that rate, nor than the one refused
  -- before (a bucket refilled in a slow spell lets the interval shrink past the rate before
  -- the next refusal). The starts are at least one latency apart at one request in flight.
  local function widen_interval(sp_rate)
    local spacing = math.max(interval, (avg or lat) / limit)
    -- ms a request the site let through since the last cut or the streak's start: a token
    -- bucket empty at both refusals let through exactly its rate in between; with less
    -- than RATE_MS of that, the last whole second's (when the streak covered it)
    local since = now - math.max(cut_at or 0, streak_at or 0)
    local per = (since >= RATE_MS and count >= 2) and since / count
      or (sp_rate > 0 and 1000 / sp_rate or 0)
    refused = math.max(spacing, 1, per, (refused or 0) * IVL_KEEP)
    local served = per > 0 and IVL_UP * per or IVL_START
    interval = math.min(math.max(spacing * IVL_UP, served), FLOOR_MS)
  end

  -- An overload signal of a request claimed after the last decrease (a new window): cut.
  local function overload_cut(sp_rate)
    -- a refusal answered as fast as a page (a rate limiter at the door, or a site past its
    -- queue): straight to the minimum, slow start back up to half the limit; slow answers,
    -- timeouts, resets: halve the limit
    local quick = base and lat <= base * GOOD + SLACK
    threshold = math.max(lo, limit * CUT)
    -- the ceiling: the limit refused, less one, until PROBE_N answers pass without a cut
    if limit > lo then cap = math.max(lo, math.floor(limit) - 1) end
    if limit > lo and not quick then
      limit = threshold
    elseif limit > lo then
      -- the starts were at most (latency / limit) apart: space them from now on
      refused = (avg or lat) / limit
      limit = lo
      interval = sp_rate > 0 and IVL_UP * 1000 / sp_rate or IVL_START
    else
      widen_interval(sp_rate)
    end
    if base and not long_avg then
      -- the site refused: the baseline stops drifting (see learn_latency), from at least
      -- the average / GOOD (a fast first answer could have left it far below)
      base = math.max(base, avg / GOOD)
      long_avg = base
    end
    cut_at, count = now, 0
  end

  -- An overload signal: cut the rate (a new window) or lower the ceiling. Whether it is
  -- excused: the domain answered lately and its rate is not near the floor.
  local function overload(fresh, sp_rate)
    local at_floor = limit <= lo and interval * IVL_UP >= FLOOR_MS  -- at it, or one step off
    if fresh then
      overload_cut(sp_rate)
    elseif cap then
      -- each request of the window refused after the first: the site held one fewer (slow
      -- start's overshoot cut at 20 when the site refuses past 16 leaves 19 - 3 = 16)
      cap = math.max(lo, cap - 1)
    end
    return ok_at > 0 and now - ok_at < RECENT_MS and not at_floor
  end

  -- Good answers at a limit in use: slow start (+1 an answer) up to the threshold of the
  -- last decrease, then +1/limit, scaled down for a site answering faster than RAMP_MS (a
  -- fast answer says nothing of capacity: a limiter's first refusal costs about as many
  -- requests as the limit its burst let it reach); only while the limit is in use (in slow
  -- start, half of it: TCP's rule, as a settle batch answers many requests against one
  -- in-flight count), and no further than the ceiling
  local function grow()
    local slow = not threshold or limit < threshold
    local used = inflight or 0
    if used >= math.floor(limit) or (slow and 2 * used >= limit) then
      -- past the threshold the step shrinks as the average nears the bound: noise dips
      -- under it crept the limit up to where the average stays past BAD
      local good = base * GOOD + SLACK
      local step = slow and 1 or math.min(1, (good - avg) / (good - base)) / limit
      local grown = math.min(hi, limit + step * math.min(1, (avg / RAMP_MS) ^ 2))
      limit = cap and math.min(grown, math.max(cap, limit)) or grown
    end
  end

  -- Good answers with an interval: back quickly towards the interval refused last, then
  -- probe past it slowly; under the average latency it is dropped.
  local function shorten_interval()
    local target = (refused or 0) * IVL_NEAR
    if interval > target then
      interval = math.max(interval - (interval - target) * IVL_BACK, target)
    else
      interval = interval * IVL_DOWN
    end
    if interval < avg then interval = 0 end
  end

  -- An answer (done, or a failure not charged to the domain): learn its latency, then cut,
  -- shorten the interval or grow.
  local function answer(fresh)
    learn_latency(fresh, fresh and math.floor(limit) <= 1 and (inflight or 0) <= 1)
    if now - ok_at > math.max(1000, 2 * interval) then  -- answering again after a silence
      streak_at, count = now, 0
    end
    ok_at = now
    sec_n = sec_n + 1
    count = count + 1
    if cap and count >= PROBE_N then cap = nil end  -- long without a cut: probe past it
    if avg > base * BAD + SLACK then
      if fresh and limit > lo then
        limit = math.max(lo, limit * LAT_CUT)
        cut_at, count = now, 0
      end
    elseif avg <= base * GOOD + SLACK then
      if interval > 0 then shorten_interval() else grow() end
    end
  end

  local function load_state(s, x)
    now, lat, lo, hi = x.now, x.lat, x.min, x.max
    limit, interval = math.min(math.max(s.limit, lo), hi), s.interval or 0
    base, avg, cut_at, ok_at = s.base, s.avg, s.cut_at, s.ok_at or 0
    sec, sec_n, prev_n = s.sec or 0, s.sec_n or 0, s.prev_n or 0
    threshold, refused, cap, count = s.threshold, s.refused, s.cap, s.count or 0
    streak_at, long_avg, inflight = s.streak_at, s.long_avg, s.inflight
  end

  local function new_state()
    return {limit = limit, interval = interval, base = base, avg = avg, cut_at = cut_at,
      ok_at = ok_at, sec = sec, sec_n = sec_n, prev_n = prev_n, threshold = threshold,
      refused = refused, cap = cap, count = count, streak_at = streak_at,
      long_avg = long_avg, inflight = inflight}
  end

  -- One settled attempt's effect on a domain's rate: the new state (nil: unchanged) and
  -- whether an overload signal is excused. `state` is not changed.
  return function(state, x)
    if not x.overload and x.outcome ~= 'done' and x.failed == true then return nil, false end
    load_state(state, x)
    -- claimed after the last decrease took effect (one interval after it): a new window
    local fresh = (x.claimed or 0) >= (cut_at or 0) + interval
    -- answers per second: this second's (sec_n) and the one before's (prev_n)
    local this_sec = math.floor(now / 1000)
    if sec ~= this_sec then
      prev_n = (sec == this_sec - 1) and sec_n or 0
      sec_n, sec = 0, this_sec
    end
    if not x.overload then
      answer(fresh)
      return new_state(), false
    end
    -- the answers of the last whole second tell the site's rate only when the domain was
    -- answering all through it (not when its first answers fell in the end of that second)
    local sp_rate = (prev_n >= 2 and streak_at and streak_at <= (this_sec - 1) * 1000)
      and prev_n or 0
    local excused = overload(fresh, sp_rate)
    return new_state(), excused
  end
end)()

function RULE.adaptive_charges(state, x)
  if x.failed == true or x.overload then return true end
  if not state then return false end
  local new = adaptive_step(state, x)
  if not new then return false end
  local before = math.min(math.max(state.limit, x.min), x.max)
  return new.limit < before or (new.interval or 0) > (state.interval or 0)
end
