--[[
  Adaptive politeness (domain_concurrency = auto), the rule: a domain's concurrency limit and
  the interval between its request starts, learned from the outcomes settle already sees.
  Pure: adaptive_step(state, sample) reads no key and writes none; adaptive.lua reads the
  state from the domain's hash and writes it back, so tests/test_adaptive_step.py EVALs the
  rule with states and samples directly. Depends on nothing. docs/DESIGN.md, "Adaptive
  politeness", says why it works this way.

  The state: each field a number or nil, stored in the domain's hash under the field that
  ADAPTIVE_FIELDS names (in brackets; scrapeq/engine/wire.py documents them too):
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
]]

-- The rule's constants, one table (one local of the script's 200).
local A = {GOOD = 1.5, BAD = 2.0, SLACK = 10, EWMA = 0.2, LONG = 0.02, DRIFT = 0.01,
  CUT = 0.5, LAT_CUT = 0.75, IVL_START = 100, IVL_UP = 1.5, IVL_DOWN = 0.998,
  IVL_NEAR = 1.2, IVL_BACK = 0.1, IVL_KEEP = 1.0, FLOOR_MS = 4000, RECENT_MS = 15000,
  RAMP_MS = 25, PROBE_N = 1000, RATE_MS = 500}

-- The state's fields in the domain's hash, in the order they are written.
local ADAPTIVE_FIELDS = {{'limit', 'alim'}, {'interval', 'aivl'}, {'base', 'abase'},
  {'avg', 'alat'}, {'cut_at', 'acut'}, {'ok_at', 'aok'}, {'sec', 'asb'}, {'sec_n', 'asn'},
  {'prev_n', 'asp'}, {'threshold', 'ath'}, {'refused', 'abad'}, {'cap', 'acap'},
  {'count', 'acnt'}, {'streak_at', 'asa'}, {'long_avg', 'alt'}}

-- The latency average, baseline and long average after an answer of `lat` ms (`fresh`:
-- claimed after the last decrease took effect; `alone`: and at a limit of one, nothing else
-- in flight). The average leaves out answers of requests claimed before the last decrease:
-- they queued behind a load we have left. Until the site first refused (lt unset), the
-- baseline is the average's decaying minimum (DRIFT an answer: the minimum of a noisy
-- average sinks far below the site's usual latency); from then on, the long average's
-- minimum: no longer rising on its own, since past the site's capacity the latency we see
-- is our own queue, and a baseline that followed it let the limit grow to the refusals.
local function adaptive_latency(lat, avg, base, lt, fresh, alone)
  if fresh or not avg then avg = avg and (avg + (lat - avg) * A.EWMA) or lat end
  if lt then lt = lt + (lat - lt) * A.LONG end
  if not base then
    base = avg
  elseif lt then
    base = math.min(base, lt)
  else
    base = math.min(avg, base * (1 + A.DRIFT))
  end
  if alone then
    -- a request alone in flight at a limit of one, claimed at it, queued behind none of
    -- ours: what it takes is the no-load latency, so the baseline is no further below it
    -- than GOOD allows (a site whose latency varies widely got a baseline from a fast first
    -- answer or a dip of the average, and was held at one request for as long as the drift
    -- took to catch up: 30 s for a 400 ms shop in the incident's fleet). Its own latency
    -- when lower than the average: the average may still hold answers that queued.
    base = math.max(base, math.min(avg, lat) / A.GOOD)
    lt = lt and math.max(lt, base)
  end
  return avg, base, lt
end

-- An overload signal of a request claimed after the last decrease (a new window): cut the
-- rate. `s` is the new state (changed in place), `x` the sample.
local function adaptive_overload_cut(s, x, sp_rate)
  local lo, lat = x.min, x.lat
  -- a refusal answered as fast as a page (a rate limiter at the door, or a site past its
  -- queue): straight to the minimum, slow start back up to half the limit; slow answers,
  -- timeouts, resets: halve the limit
  local quick = s.base and lat <= s.base * A.GOOD + A.SLACK
  s.threshold = math.max(lo, s.limit * A.CUT)
  -- the ceiling: the limit refused, less one, until PROBE_N answers pass without a cut
  if s.limit > lo then s.cap = math.max(lo, math.floor(s.limit) - 1) end
  if s.limit > lo and not quick then
    s.limit = s.threshold
  elseif s.limit > lo then
    -- the starts were at most (latency / limit) apart: space them from now on
    s.refused = (s.avg or lat) / s.limit
    s.limit = lo
    s.interval = sp_rate > 0 and A.IVL_UP * 1000 / sp_rate or A.IVL_START
  else
    -- at the minimum limit: space the starts IVL_UP x wider than now, and no closer than
    -- IVL_UP x the ms a request the site let through lately (its rate limit, when it has
    -- one); the interval refused is no shorter than that rate, nor than the one refused
    -- before (a bucket refilled in a slow spell lets the interval shrink past the rate
    -- before the next refusal). The starts are at least one latency apart at one request
    -- in flight.
    local spacing = math.max(s.interval, (s.avg or lat) / s.limit)
    -- ms a request the site let through since the last cut or the streak's start: a token
    -- bucket empty at both refusals let through exactly its rate in between; with less
    -- than RATE_MS of that, the last whole second's (when the streak covered it)
    local since = x.now - math.max(s.cut_at or 0, s.streak_at or 0)
    local per = (since >= A.RATE_MS and s.count >= 2) and since / s.count
      or (sp_rate > 0 and 1000 / sp_rate or 0)
    s.refused = math.max(spacing, 1, per, (s.refused or 0) * A.IVL_KEEP)
    local served = per > 0 and A.IVL_UP * per or A.IVL_START
    s.interval = math.min(math.max(spacing * A.IVL_UP, served), A.FLOOR_MS)
  end
  if s.base and not s.long_avg then
    -- the site refused: the baseline stops drifting (see adaptive_latency), from at least
    -- the average / GOOD (a fast first answer could have left it far below)
    s.base = math.max(s.base, s.avg / A.GOOD)
    s.long_avg = s.base
  end
  s.cut_at, s.count = x.now, 0
end

-- An overload signal: cut the rate (a new window) or lower the ceiling. Whether it is
-- excused: the domain answered lately and its rate is not near the floor.
local function adaptive_overload(s, x, fresh, sp_rate)
  local at_floor = s.limit <= x.min and s.interval * A.IVL_UP >= A.FLOOR_MS  -- or one step off
  if fresh then
    adaptive_overload_cut(s, x, sp_rate)
  elseif s.cap then
    -- each request of the window refused after the first: the site held one fewer (slow
    -- start's overshoot cut at 20 when the site refuses past 16 leaves 19 - 3 = 16)
    s.cap = math.max(x.min, s.cap - 1)
  end
  return s.ok_at > 0 and x.now - s.ok_at < A.RECENT_MS and not at_floor
end

-- Good answers at a limit in use: slow start (+1 an answer) up to the threshold of the last
-- decrease, then +1/limit, scaled down for a site answering faster than RAMP_MS (a fast
-- answer says nothing of capacity: a limiter's first refusal costs about as many requests
-- as the limit its burst let it reach); only while the limit is in use (in slow start, half
-- of it: TCP's rule, as a settle batch answers many requests against one in-flight count),
-- and no further than the ceiling
local function adaptive_grow(s, x)
  local slow = not s.threshold or s.limit < s.threshold
  local used = s.inflight or 0
  if used >= math.floor(s.limit) or (slow and 2 * used >= s.limit) then
    -- past the threshold the step shrinks as the average nears the bound: noise dips under
    -- it crept the limit up to where the average stays past BAD
    local good = s.base * A.GOOD + A.SLACK
    local step = slow and 1 or math.min(1, (good - s.avg) / (good - s.base)) / s.limit
    local grown = math.min(x.max, s.limit + step * math.min(1, (s.avg / A.RAMP_MS) ^ 2))
    s.limit = s.cap and math.min(grown, math.max(s.cap, s.limit)) or grown
  end
end

-- An answer (done, or a failure not charged to the domain): learn its latency, then cut,
-- shorten the interval or grow.
local function adaptive_answer(s, x, fresh)
  local alone = fresh and math.floor(s.limit) <= 1 and (s.inflight or 0) <= 1
  s.avg, s.base, s.long_avg = adaptive_latency(x.lat, s.avg, s.base, s.long_avg, fresh, alone)
  if x.now - s.ok_at > math.max(1000, 2 * s.interval) then  -- answering again after a silence
    s.streak_at, s.count = x.now, 0
  end
  s.ok_at = x.now
  s.sec_n = s.sec_n + 1
  s.count = s.count + 1
  if s.cap and s.count >= A.PROBE_N then s.cap = nil end  -- long without a cut: probe past it
  if s.avg > s.base * A.BAD + A.SLACK then
    if fresh and s.limit > x.min then
      s.limit = math.max(x.min, s.limit * A.LAT_CUT)
      s.cut_at, s.count = x.now, 0
    end
  elseif s.avg <= s.base * A.GOOD + A.SLACK then
    if s.interval > 0 then
      -- back quickly towards the interval that was refused last, then probe past it slowly
      local target = (s.refused or 0) * A.IVL_NEAR
      if s.interval > target then
        s.interval = math.max(s.interval - (s.interval - target) * A.IVL_BACK, target)
      else
        s.interval = s.interval * A.IVL_DOWN
      end
      if s.interval < s.avg then s.interval = 0 end
    else
      adaptive_grow(s, x)
    end
  end
end

-- One settled attempt's effect on a domain's rate: the new state (nil: unchanged) and
-- whether an overload signal is excused. `state` is not changed.
local function adaptive_step(state, x)
  if not x.overload and x.outcome ~= 'done' and x.failed == true then return nil, false end
  local s = {}
  for k, v in pairs(state) do s[k] = v end
  s.limit = math.min(math.max(s.limit, x.min), x.max)
  s.interval, s.ok_at, s.count = s.interval or 0, s.ok_at or 0, s.count or 0
  s.sec, s.sec_n, s.prev_n = s.sec or 0, s.sec_n or 0, s.prev_n or 0
  -- claimed after the last decrease took effect (one interval after it): a new window
  local fresh = (x.claimed or 0) >= (s.cut_at or 0) + s.interval
  -- answers per second: this second's (sec_n) and the one before's (prev_n)
  local sec = math.floor(x.now / 1000)
  if s.sec ~= sec then
    s.prev_n = (s.sec == sec - 1) and s.sec_n or 0
    s.sec_n, s.sec = 0, sec
  end
  if not x.overload then
    adaptive_answer(s, x, fresh)
    return s, false
  end
  -- the answers of the last whole second tell the site's rate only when the domain was
  -- answering all through it (not when its first answers fell in the end of that second)
  local sp_rate = (s.prev_n >= 2 and s.streak_at and s.streak_at <= (sec - 1) * 1000)
    and s.prev_n or 0
  return s, adaptive_overload(s, x, fresh, sp_rate)
end
