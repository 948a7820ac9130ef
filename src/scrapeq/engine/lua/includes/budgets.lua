--[[
  The four budgets of a job, in one place (issue 39). budget_spent(job, which): whether the
  job has none of `which` left, so taking one more goes past it. Each is a count the job
  carries (its stored field) against a bound:
    'attempts'    job.attempts (counted at claim) against job.max_attempts: a failed attempt
                  is retried while one is left, else dead 'max_attempts' (jobs.lua,
                  retry_or_dead)
    'throttles'   job.throttles against CFG.max_throttles: one more throttle past it is dead
                  'max_throttles' (settle-1.lua, settle_throttle)
    'releases'    job.releases against CFG.max_releases: one more release of our own past it
                  is dead 'max_releases' (settle-1.lua, settle_release)
    'give_backs'  job.unused against 2 x job.max_attempts: an expired lease whose handler did
                  not run gives its attempt back while one is left, else the attempt counts
                  (housekeeping.lua, give_back)
  Pure (reads the job and CFG only): tested table-driven (tests/engine/test_budgets_rule.py).
]]
--@include rules

function RULE.budget_spent(job, which)
  local count, bound
  if which == 'attempts' then
    count, bound = job.attempts, job.max_attempts
  elseif which == 'throttles' then
    count, bound = job.throttles or 0, CFG.max_throttles
  elseif which == 'releases' then
    count, bound = job.releases or 0, CFG.max_releases
  elseif which == 'give_backs' then
    count, bound = job.unused or 0, 2 * job.max_attempts
  else
    error('budget_spent: unknown budget ' .. tostring(which))
  end
  return count >= bound
end
