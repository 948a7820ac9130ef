--[[
  Revisits (revisit = on), the rule: when a page comes back and how its domain's budget of
  revisit fetches is shared. Pure: RV.step(page, dom, obs, cfg) reads no key and writes none;
  revisit.lua reads the state and writes it back, so tests/engine/test_revisit_rule.py EVALs the
  rule with states directly (cases in tests/engine/data/revisit_rule_cases.json), and
  bench/freshness.py runs the same rule. Depends on nothing. docs/DESIGN.md, "Revisits",
  says why it works this way.

  Every function lives in the one table RV (revisit.lua adds its reads and writes to it):
  settle-1.lua is near Lua 5.1's 200 top-level locals.

  Units: times in seconds, rates per hour.

  page (nil: a URL seen for the first time): last (s, its last visit), due (s, the visit
    scheduled after it), n (intervals observed), x (of them, those that ended in a change),
    tc, tu (s: total length of the intervals that ended changed, unchanged)
  obs: now (s), changed (true, false; nil: no observation, a first visit)
  dom (the domain's): mu (the Lagrange multiplier, hours; nil: not yet), load (the revisit
    rate its pages are scheduled at, fetches per hour), n (pages tracked), fw, w (sums of
    weight x estimated freshness and of weight, over the pages whose rate is estimated)
  cfg: budget (fetches per hour for the domain's revisits), min, max (s: the shortest and the
    longest interval), w (the page's weight, > 0)

  RV.step answers (page', dom', interval s). The page's next visit is due at now + interval.

  Estimator (RV.rate): changes are seen only at visits. With intervals t_i ending changed or
  not, the MLE of a Poisson rate, taking the changed intervals as equal to their mean, is
  lambda = (x / tc) log((tc + tu) / tu); Cho & Garcia-Molina's bias-reduced estimator adds
  half an interval (h = (tc + tu) / 2n) to both terms: lambda = (x / tc) log((tc + tu + h) /
  (tu + h)). With equal intervals I it is exactly theirs: -log((n - x + 0.5) / (n + 0.5)) / I;
  it stays finite when every visit saw a change (x = n), and is 0 when none did.

  Allocation (RV.freq): maximise the domain's sum of w F(lambda, f) under sum f = budget,
  F(lambda, f) = (f / lambda)(1 - exp(-lambda / f)), the time-averaged freshness of a page of
  rate lambda visited f times per unit time (Cho & Garcia-Molina 2003). Lagrange: each page's
  f solves w dF/df = mu, dF/df = (1 - (1 + r) e^-r) / lambda with r = lambda / f, solved for r
  by bisection (RV_ITER steps). A page whose marginal value never reaches mu (w / lambda <=
  mu: it changes too fast to be kept fresh at this price) or that never changed is visited
  at the floor (every cfg.max s). mu is one number per domain, moved after each visit by
  feedback (x exp(ETA (load - budget) / budget)) so the domain's scheduled load meets its
  budget: a decentralised solution of the same optimum (each page is decided at its own
  visit, with the domain's current price).
]]

local RV = {ETA = 0.02, ITER = 60, MU0 = 1.0, MU_LO = 1e-9, MU_HI = 1e9}

-- Estimated change rate per hour; nil before any interval was observed.
function RV.rate(p)
  if not p or (p.n or 0) < 1 then return nil end
  if (p.x or 0) < 1 or p.tc <= 0 then return 0 end
  local h = 0.5 * (p.tc + p.tu) / p.n
  return 3600 * (p.x / p.tc) * math.log((p.tc + p.tu + h) / (p.tu + h))
end

-- Time-averaged freshness of a page of rate lam visited f times an hour.
function RV.fresh(lam, f)
  if lam <= 0 then return 1 end
  if f <= 0 then return 0 end
  local r = lam / f
  return (1 - math.exp(-r)) / r
end

-- The optimal visits per hour at price mu (0: not worth a visit at any rate).
function RV.freq(lam, w, mu)
  if lam <= 0 or w / lam <= mu then return 0 end
  local c = 1 - mu * lam / w  -- (1 + r) e^-r = c, decreasing in r from 1 to 0
  local lo, hi = math.log(1e-9), math.log(700)
  for _ = 1, RV.ITER do
    local mid = 0.5 * (lo + hi)
    local r = math.exp(mid)
    if (1 + r) * math.exp(-r) > c then lo = mid else hi = mid end
  end
  return lam / math.exp(0.5 * (lo + hi))
end

-- The visits per hour of a page (rate lam, nil: unknown) within the bounds.
function RV.visits(lam, dom, cfg)
  local f
  if lam == nil then
    f = cfg.budget / math.max(dom.n, 1)  -- not yet estimated: a fair share
  else
    f = RV.freq(lam, cfg.w, dom.mu)
  end
  return math.min(math.max(f, 3600 / cfg.max), 3600 / cfg.min)
end

-- A page's part of its domain's sums: its scheduled rate, and its weighted freshness.
function RV.part(p, dom, sign, w)
  local f = 3600 / math.max(p.due - p.last, 1)
  dom.load = math.max(dom.load + sign * f, 0)
  local lam = RV.rate(p)
  if lam ~= nil then
    dom.fw = math.max(dom.fw + sign * w * RV.fresh(lam, f), 0)
    dom.w = math.max(dom.w + sign * w, 0)
  end
end

function RV.step(page, dom, obs, cfg)
  local d = {mu = dom.mu or RV.MU0, load = dom.load or 0, n = dom.n or 0, fw = dom.fw or 0,
    w = dom.w or 0}
  local now = math.floor(obs.now)
  local p
  if page then
    RV.part(page, d, -1, cfg.w)
    p = {n = page.n, x = page.x, tc = page.tc, tu = page.tu}
    local t = now - page.last
    if t > 0 and obs.changed ~= nil then
      p.n = p.n + 1
      if obs.changed then
        p.x = p.x + 1
        p.tc = p.tc + t
      else
        p.tu = p.tu + t
      end
    end
  else
    d.n = d.n + 1
    p = {n = 0, x = 0, tc = 0, tu = 0}
  end
  if p.n >= 60000 then  -- the counts are stored in 16 bits: halve them, the rate kept
    p.n, p.x = math.floor(p.n / 2), math.floor(p.x / 2)
    p.tc, p.tu = math.floor(p.tc / 2), math.floor(p.tu / 2)
  end
  local f = RV.visits(RV.rate(p), d, cfg)
  local interval = math.max(math.floor(3600 / f + 0.5), 1)
  p.last, p.due = now, now + interval
  RV.part(p, d, 1, cfg.w)
  if cfg.budget > 0 then
    local mu = d.mu * math.exp(RV.ETA * math.min(math.max((d.load - cfg.budget) / cfg.budget,
      -1), 1))
    d.mu = math.min(math.max(mu, RV.MU_LO), RV.MU_HI)
  end
  return p, d, interval
end
