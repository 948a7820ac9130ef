--[[
  Adaptive politeness (domain_concurrency = auto): a domain's concurrency limit and the
  interval between its request starts, learned from the outcomes settle already sees.
  Depends on common.lua and domain.lua (adaptive_on, adaptive_start). docs/DESIGN.md,
  "Adaptive politeness", says why it works this way.

  Domain hash fields (besides domain.lua's):
    alim   the concurrency limit (a float; claims take floor(alim), within the bounds)
    aivl   ms between request starts once the limit is at its minimum (0: none)
    alat   current latency, ms: the moving average (EWMA) of answered requests' latencies,
           but those of requests claimed before the last decrease (acut)
    abase  no-load latency, ms: alat's decaying minimum (of the average, not of single
           samples: the fastest of a few hundred answers is far below a site's usual) until
           the site first refuses, then alt's minimum (no longer rising on its own); at a
           limit of one request it is at least alat / GOOD (one request queues behind none)
    alt    the long average (weight LONG) of the latencies, kept from the first overload
           cut on (unset before it)
    acut   ms: when the rate was last lowered (one decrease per window: only outcomes of
           requests claimed after it lower it again)
    aok    ms: the last answered request (a site that answered lately is alive)
    asb, asn, asp  answers per second: the second (floor(ms / 1000)) of asn, the answers
           counted in it, and in the second before it (0 when none)
    ath    slow-start threshold: the limit a decrease left (+1 an answer below it)
    abad   ms: the interval last refused (at least KEEP x the one refused before it)
    acap   the ceiling: the limit an overload signal cut, less one, and one less for each
           request of that window refused after it; the limit does not grow past it until
           PROBE_N answers pass without a decrease (then it is forgotten)
    acnt   answers since the last decrease, or since the streak began when that is later
    asa    ms: when the current streak of answers began (after a silence longer than 1 s
           and than twice the interval)

  AIMD on the limit: an answer whose latency average stays near the baseline (alat <=
  abase * GOOD + SLACK), while the limit is in use (in slow start: half of it), raises it
  (+1 an answer up to the slow-start threshold ath, then +1/limit x the share of the way from
  abase to the bound still left; each step scaled by min(1, (alat / RAMP_MS)^2); never past
  the ceiling acap); latency past abase * BAD + SLACK cuts it (x LAT_CUT); an overload
  signal (the client's `ov`: 429, 503, timeout, reset) halves it (x CUT) and sets the
  ceiling, or, answered as fast as a page (a rate limiter at the door), drops it to the
  minimum and starts the interval. At the minimum, an overload lengthens the
  interval (x IVL_UP the spacing, no shorter than IVL_UP x the ms a request the site let
  through since the last decrease or the streak's start (RATE_MS of them at least; else in the
  last whole second, when the streak covered it), up to FLOOR_MS); good answers shorten it
  (BACK of the way to NEAR x the interval last refused, then x IVL_DOWN an answer), and drop
  it under alat.

  Slow down before condemning: an overload signal is kept from the breaker (and a retry
  becomes a throttle: no attempt spent, the job queued again at once, paced by the domain)
  while the domain answered within RECENT_MS and its rate is not near the floor (limit at
  its minimum and interval within one IVL_UP step of FLOOR_MS). A site that never answers
  gets no excuse: it trips exactly as before.
]]

local A_GOOD, A_BAD, A_SLACK = 1.5, 2.0, 10
local A_EWMA, A_LONG, A_DRIFT = 0.2, 0.02, 0.01
local A_CUT, A_LAT_CUT = 0.5, 0.75
local A_IVL_START, A_IVL_UP, A_IVL_DOWN = 100, 1.5, 0.998
local A_IVL_NEAR, A_IVL_BACK, A_IVL_KEEP = 1.2, 0.1, 1.0
local A_FLOOR_MS, A_RECENT_MS, A_RAMP_MS, A_PROBE_N, A_RATE_MS = 4000, 15000, 25, 1000, 500

-- The latency average, baseline and long average after an answer of `lat` ms (`fresh`:
-- claimed after the last decrease took effect; `alone`: and at a limit of one, nothing else
-- in flight). The average leaves out answers of requests claimed before the last decrease:
-- they queued behind a load we have left. Until the site first refused (lt unset), the
-- baseline is the average's decaying minimum (DRIFT an answer: the minimum of a noisy
-- average sinks far below the site's usual latency); from then on, the long average's
-- minimum: no longer rising on its own, since past the site's capacity the latency we see
-- is our own queue, and a baseline that followed it let the limit grow to the refusals.
local function adaptive_latency(lat, avg, base, lt, fresh, alone)
  if fresh or not avg then avg = avg and (avg + (lat - avg) * A_EWMA) or lat end
  if lt then lt = lt + (lat - lt) * A_LONG end
  if not base then
    base = avg
  elseif lt then
    base = math.min(base, lt)
  else
    base = math.min(avg, base * (1 + A_DRIFT))
  end
  if alone then
    -- a request alone in flight at a limit of one, claimed at it, queued behind none of
    -- ours: what it takes is the no-load latency, so the baseline is no further below it
    -- than GOOD allows (a site whose latency varies widely got a baseline from a fast first
    -- answer or a dip of the average, and was held at one request for as long as the drift
    -- took to catch up: 30 s for a 400 ms shop in the incident's fleet). Its own latency
    -- when lower than the average: the average may still hold answers that queued.
    base = math.max(base, math.min(avg, lat) / A_GOOD)
    lt = lt and math.max(lt, base)
  end
  return avg, base, lt
end

-- The breaker input of settle item `it` for domain d, after its outcome adjusted the
-- domain's rate: it.df, or nil when an overload is excused (then `it` becomes a throttle).
local function adaptive_outcome(d, job, it)
  local lat = tonumber(it.lat)
  if not lat then return it.df end
  local dk = k_dom(d)
  local f = redis.call('HMGET', dk, 'conc', 'alim', 'aivl', 'abase', 'alat', 'acut', 'aok',
    'inflight', 'asb', 'asn', 'asp', 'ath', 'abad', 'acap', 'acnt', 'asa', 'alt')
  if not adaptive_on(f[1]) then return it.df end
  local lo, hi = CFG.conc_min, CFG.conc_max
  local lim = math.min(math.max(tonumber(f[2]) or adaptive_start(), lo), hi)
  local ivl = tonumber(f[3]) or 0
  local base, avg = tonumber(f[4]), tonumber(f[5])
  local cut, okt = tonumber(f[6]), tonumber(f[7]) or 0
  -- claimed after the last decrease took effect (one interval after it): a new window
  local fresh = (tonumber(job.claimed) or 0) >= (cut or 0) + ivl
  -- answers per second: this second's (asn) and the one before's (asp), second asb
  local sec, sb = math.floor(NOW / 1000), tonumber(f[9]) or 0
  local sn, sp = tonumber(f[10]) or 0, tonumber(f[11]) or 0
  if sb ~= sec then
    sp = (sb == sec - 1) and sn or 0
    sn, sb = 0, sec
  end
  local th, bad = tonumber(f[12]), tonumber(f[13])
  local cap, cnt, streak = tonumber(f[14]), tonumber(f[15]) or 0, tonumber(f[16])
  local lt = tonumber(f[17])
  -- the answers of the last whole second tell the site's rate only when the domain was
  -- answering all through it (not when its first answers fell in the end of that second)
  local sp_rate = (sp >= 2 and streak and streak <= (sec - 1) * 1000) and sp or 0
  local df = it.df
  if df == cjson.null then df = nil end
  if it.ov == true then
    local at_floor = lim <= lo and ivl * A_IVL_UP >= A_FLOOR_MS  -- at it, or one step off
    if fresh then
      -- a refusal answered as fast as a page (a rate limiter at the door, or a site past its
      -- queue): straight to the minimum, slow start back up to half the limit; slow
      -- answers, timeouts, resets: halve the limit
      local quick = base and lat <= base * A_GOOD + A_SLACK
      th = math.max(lo, lim * A_CUT)
      -- the ceiling: the limit refused, less one, until PROBE_N answers pass without a cut
      if lim > lo then cap = math.max(lo, math.floor(lim) - 1) end
      if lim > lo and not quick then
        lim = th
      elseif lim > lo then
        -- the starts were at most (latency / limit) apart: space them from now on
        bad = (avg or lat) / lim
        lim = lo
        ivl = sp_rate > 0 and A_IVL_UP * 1000 / sp_rate or A_IVL_START
      else
        -- at the minimum limit: space the starts IVL_UP x wider than now, and no closer
        -- than IVL_UP x the ms a request the site let through lately (its rate limit, when
        -- it has one); the interval refused is no shorter than that rate, nor than the one
        -- refused before (a bucket refilled in a slow spell lets the interval shrink past
        -- the rate before the next refusal). The starts are at least one latency apart at
        -- one request in flight.
        local spacing = math.max(ivl, (avg or lat) / lim)
        -- ms a request the site let through since the last cut or the streak's start: a
        -- token bucket empty at both refusals let through exactly its rate in between; with
        -- less than RATE_MS of that, the last whole second's (when the streak covered it)
        local since = NOW - math.max(cut or 0, streak or 0)
        local per = (since >= A_RATE_MS and cnt >= 2) and since / cnt
          or (sp_rate > 0 and 1000 / sp_rate or 0)
        bad = math.max(spacing, 1, per, (bad or 0) * A_IVL_KEEP)
        local served = per > 0 and A_IVL_UP * per or A_IVL_START
        ivl = math.min(math.max(spacing * A_IVL_UP, served), A_FLOOR_MS)
      end
      if base and not lt then
        -- the site refused: the baseline stops drifting (see adaptive_latency), from at
        -- least the average / GOOD (a fast first answer could have left it far below)
        base = math.max(base, avg / A_GOOD)
        lt = base
      end
      cut, cnt = NOW, 0
    elseif cap then
      -- each request of the window refused after the first: the site held one fewer (slow
      -- start's overshoot cut at 20 when the site refuses past 16 leaves 19 - 3 = 16)
      cap = math.max(lo, cap - 1)
    end
    if okt > 0 and NOW - okt < A_RECENT_MS and not at_floor then
      df = nil
      if it.o == 'retry' then
        it.o = 'throttle'
        it.delay = 0
      end
    end
  elseif it.o == 'done' or df ~= true then
    local alone = fresh and math.floor(lim) <= 1 and (tonumber(f[8]) or 0) <= 1
    avg, base, lt = adaptive_latency(lat, avg, base, lt, fresh, alone)
    if NOW - okt > math.max(1000, 2 * ivl) then  -- answering again after a silence
      streak, cnt = NOW, 0
    end
    okt = NOW
    sn = sn + 1
    cnt = cnt + 1
    if cap and cnt >= A_PROBE_N then cap = nil end  -- long without a cut: probe past it
    if avg > base * A_BAD + A_SLACK then
      if fresh and lim > lo then
        lim = math.max(lo, lim * A_LAT_CUT)
        cut, cnt = NOW, 0
      end
    elseif avg <= base * A_GOOD + A_SLACK then
      if ivl > 0 then
        -- back quickly towards the interval that was refused last, then probe past it slowly
        local target = (bad or 0) * A_IVL_NEAR
        if ivl > target then
          ivl = math.max(ivl - (ivl - target) * A_IVL_BACK, target)
        else
          ivl = ivl * A_IVL_DOWN
        end
        if ivl < avg then ivl = 0 end
      else
        -- slow start (+1 an answer) up to the threshold of the last decrease, then +1/limit,
        -- scaled down for a site answering faster than RAMP_MS (a fast answer says nothing
        -- of capacity: a limiter's first refusal costs about as many requests as the limit
        -- its burst let it reach); only while the limit is in use (in slow start, half of it:
        -- TCP's rule, as a settle batch answers many requests against one in-flight count),
        -- and no further than the ceiling
        local slow = not th or lim < th
        local used = tonumber(f[8]) or 0
        if used >= math.floor(lim) or (slow and 2 * used >= lim) then
          -- past the threshold the step shrinks as the average nears the bound: noise dips
          -- under it crept the limit up to where the average stays past BAD
          local good = base * A_GOOD + A_SLACK
          local step = slow and 1 or math.min(1, (good - avg) / (good - base)) / lim
          local grown = math.min(hi, lim + step * math.min(1, (avg / A_RAMP_MS) ^ 2))
          lim = cap and math.min(grown, math.max(cap, lim)) or grown
        end
      end
    end
  else
    return df
  end
  redis.call('HSET', dk, 'alim', lim, 'aivl', ivl, 'abase', base or '',
    'alat', avg or '', 'acut', cut or '', 'aok', okt, 'asb', sb, 'asn', sn, 'asp', sp,
    'ath', th or '', 'abad', bad or '', 'acap', cap or '', 'acnt', cnt, 'asa', streak or '',
    'alt', lt or '')
  return df
end
