--[[
  The one backoff shape of the engine (issue 39): the wait after the n-th failure in a row is
  base * 2^(n-1) ms (n below 1 counts as 1), capped at `cap`, then jittered by `jitter`:
    'full'  uniform(0, bound): a job's retry, release or give-back (jobs.lua, RULE.backoff_ms)
    'band'  bound * uniform(0.8, 1.2): a domain's breaker (breaker.lua) and an exit's
            (exits.lua) cooling down after a trip
    nil     none: an exit benched for a domain after a ban (exits.lua)
  floored to whole ms. A draw is the call's seeded random (prologue.lua): one per jittered
  wait, none for an unjittered one. Pure apart from that draw: tested table-driven
  (tests/engine/test_backoff_rule.py).
]]
--@include rules

function RULE.backoff(base, cap, n, jitter)
  local bound = base * (2 ^ math.min(math.max(n - 1, 0), 60))
  if bound > cap then bound = cap end
  if jitter == 'full' then return math.floor(math.random() * bound) end
  if jitter == 'band' then return math.floor(bound * (0.8 + 0.4 * math.random())) end
  return math.floor(bound)
end
