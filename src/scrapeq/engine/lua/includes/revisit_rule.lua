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
  dom (the domain's): mu (the price, hours; the last one solved), load (the revisit rate its
    pages are scheduled at, fetches per hour), l0 (of it, the pages with no estimate or no
    change seen), n (pages tracked), fw, w (sums of weight x estimated freshness and of
    weight, over the pages whose rate is estimated), h (histogram of the pages whose
    estimated rate is > 0: bucket (RV.bucket) -> {pages, sum of weights, sum of rates})
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
  by Newton's method (RV.ratio), within the bounds (RV.clamp: concave F, so the clamped
  optimum is the optimum in the box). A page whose marginal value never reaches mu (w /
  lambda <= mu: it changes too fast to be kept fresh at this price) gets the box's floor: not
  cfg.max but RV.KEEP of a fair share, so it is still watched (its estimate, and the price,
  move; a page sent 30 days away would be re-estimated in 30 days).

  The price (RV.price) is solved at every visit, not stepped: by bisection on log mu over the
  domain's histogram of estimated rates (pages in factors of 2 of lambda / w, each bucket's
  mean rate and weight), so that the estimated pages' demand meets what the budget leaves
  after the pages with no estimate (l0; the estimated pages keep at least their fair share).
  A domain under its budget gets a lower price at once, the lowest when every page is at
  cfg.min; no unit of time is assumed. A page with no change seen yet backs off (its next
  interval as long as it was watched unchanged) up to the floor; a new page gets a fair
  share (budget / pages tracked).
]]

local RV = {ITER = 8, PITER = 100, MU_LO = 1e-9, MU_HI = 1e9, HLO = -40, HHI = 40, KEEP = 0.5,  --@once
  KEPT = 0.01}

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

-- r > 0 with (1 + r) e^-r = 1 - c, 0 < c < 1: log(1 + r) - r = log(1 - c) =: L, solved by
-- Newton's method (the left side is concave and falling: from below the root, one step
-- lands above it and the next ones come down to it), from the lower bound
-- (a + sqrt(a^2 + 8a)) / 2, a = -L (log(1 + r) >= 2r / (2 + r)). Series where r or c is
-- tiny, so no digits are lost to 1 - c or log(1 + r) - r.
function RV.ratio(c)
  local a
  if c < 1e-4 then a = c + c * c / 2 + c * c * c / 3 else a = -math.log(1 - c) end
  local r = 0.5 * (a + math.sqrt(a * a + 8 * a))
  for _ = 1, RV.ITER do
    local g
    if r < 1e-2 then
      g = r * r * (-1 / 2 + r * (1 / 3 + r * (-1 / 4 + r * (1 / 5 + r * (-1 / 6 + r / 7)))))
    else
      g = math.log(1 + r) - r
    end
    local step = (g + a) * (1 + r) / r
    r = r + step
    if math.abs(step) <= 1e-13 * r then break end
  end
  return r
end

-- The optimal visits per hour at price mu (0: not worth a visit at any rate).
function RV.freq(lam, w, mu)
  if lam <= 0 or w / lam <= mu then return 0 end
  return lam / RV.ratio(mu * lam / w)
end

-- The histogram bucket of a page of rate lam (> 0) and weight w: factors of 2 of lam / w.
function RV.bucket(lam, w)
  local b = math.floor(math.log(lam / w) / math.log(2))
  return tostring(math.min(math.max(b, RV.HLO), RV.HHI))
end

-- A page of rate lam > 0 and weight w into (sign 1) or out of (-1) its domain's histogram
-- d.h: bucket -> {pages, sum of weights, sum of rates}.
function RV.hist(d, lam, w, sign)
  local k = RV.bucket(lam, w)
  local e = d.h[k] or {0, 0, 0}
  e = {e[1] + sign, math.max(e[2] + sign * w, 0), math.max(e[3] + sign * lam, 0)}
  if e[1] <= 0 then d.h[k] = nil else d.h[k] = e end
end

-- Visits per hour within the bounds: every cfg.min s at most, every cfg.max s at least; a
-- page seen to change (keep: true) at least at RV.KEEP of a fair share (budget / pages), so
-- a page the price leaves out now is still estimated when the price moves.
function RV.clamp(f, cfg, keep, n)
  local lo = 3600 / cfg.max
  if keep then lo = math.max(lo, RV.KEEP * cfg.budget / math.max(n or 1, 1)) end
  return math.min(math.max(f, lo), 3600 / cfg.min)
end

-- The load (visits per hour) the histogram's pages would be scheduled at, at price mu
-- (n: the domain's pages tracked).
function RV.demand(h, mu, cfg, n)
  local total = 0
  for _, e in pairs(h) do
    if e[1] > 0 and e[2] > 0 then
      total = total + e[1] * RV.clamp(RV.freq(e[3] / e[1], e[2] / e[1], mu), cfg, true, n)
    end
  end
  return total
end

-- The price at which the histogram's pages are scheduled at `target` visits per hour:
-- demand falls as mu rises, solved on log mu by regula falsi with the Illinois rule (the
-- bracket kept; tens of demands, not the ~60 of a bisection). A target above what the pages
-- can take (each at cfg.min) gives the lowest price, one below their floors the highest.
-- mu0: the domain's last price, kept when its demand is within RV.KEPT of the target.
function RV.price(h, target, cfg, n, mu0)
  -- the last price still meets the target within RV.KEPT (a visit moves one page): kept,
  -- one demand instead of tens
  if mu0 and mu0 > RV.MU_LO and mu0 < RV.MU_HI
    and math.abs(RV.demand(h, mu0, cfg, n) - target) <= RV.KEPT * target then
    return mu0
  end
  local a, b = math.log(RV.MU_LO), math.log(RV.MU_HI)
  local ga = RV.demand(h, RV.MU_LO, cfg, n) - target
  if ga <= 0 then return RV.MU_LO end
  local gb = RV.demand(h, RV.MU_HI, cfg, n) - target
  if gb >= 0 then return RV.MU_HI end
  local side = 0
  for _ = 1, RV.PITER do
    local x = (a * gb - b * ga) / (gb - ga)
    local g = RV.demand(h, math.exp(x), cfg, n) - target
    if math.abs(g) <= 1e-9 * target or b - a <= 1e-16 * math.abs(x) then return math.exp(x) end
    if g > 0 then
      a, ga = x, g
      if side == 1 then gb = gb / 2 end
      side = 1
    else
      b, gb = x, g
      if side == -1 then ga = ga / 2 end
      side = -1
    end
  end
  return math.exp(0.5 * (a + b))
end

-- A page's part of its domain's sums: its scheduled rate (load; l0 too when it is not in the
-- histogram: no estimate yet, or no change seen), and its weighted freshness.
function RV.part(p, dom, sign, w)
  local f = 3600 / math.max(p.due - p.last, 1)
  dom.load = math.max(dom.load + sign * f, 0)
  local lam = RV.rate(p)
  if lam == nil or lam <= 0 then dom.l0 = math.max(dom.l0 + sign * f, 0) end
  if lam ~= nil then
    dom.fw = math.max(dom.fw + sign * w * RV.fresh(lam, f), 0)
    dom.w = math.max(dom.w + sign * w, 0)
  end
end

-- The visits per hour of page p (its state after this visit) and the domain's price.
--   no estimate yet (a first visit): a fair share of the budget, budget / pages tracked;
--   no change seen yet: back off, the next interval as long as it has been watched unchanged
--     (so a page that never changes reaches the floor in a few visits, whatever the scale);
--   an estimated rate: the optimum at the domain's price, solved now over the histogram for
--     the budget the other pages leave (at least the estimated pages' fair share of it).
function RV.visits(p, lam, d, cfg)
  if lam == nil then return RV.clamp(cfg.budget / math.max(d.n, 1), cfg), d.mu end
  if lam <= 0 then return RV.clamp(3600 / math.max(p.tc + p.tu, 1), cfg), d.mu end
  local estimated = 0
  for _, e in pairs(d.h) do estimated = estimated + e[1] end
  local share = cfg.budget * math.min(estimated / math.max(d.n, 1), 1)
  local mu = RV.price(d.h, math.max(cfg.budget - d.l0, share), cfg, d.n, d.mu)
  -- the page's bucket's mean rate (its own estimate shrunk to its peers': within a factor of
  -- 2, a page that changes faster than its visits looks slower the rarer they are)
  local e = d.h[RV.bucket(lam, cfg.w)]
  return RV.clamp(RV.freq(e[3] / e[1], cfg.w, mu), cfg, true, d.n), mu
end

function RV.step(page, dom, obs, cfg)
  local h = {}
  for k, e in pairs(dom.h or {}) do h[k] = {e[1], e[2], e[3]} end
  local d = {mu = dom.mu or RV.MU_HI, load = dom.load or 0, n = dom.n or 0, fw = dom.fw or 0,
    w = dom.w or 0, l0 = dom.l0 or 0, h = h}
  local now = math.floor(obs.now)
  local p
  if page then
    RV.part(page, d, -1, cfg.w)
    local old = RV.rate(page)
    if old ~= nil and old > 0 then RV.hist(d, old, cfg.w, -1) end
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
  local lam = RV.rate(p)
  if lam ~= nil and lam > 0 then RV.hist(d, lam, cfg.w, 1) end
  local f, mu = RV.visits(p, lam, d, cfg)
  d.mu = mu
  local interval = math.max(math.floor(3600 / f + 0.5), 1)
  p.last, p.due = now, now + interval
  RV.part(p, d, 1, cfg.w)
  return p, d, interval
end
