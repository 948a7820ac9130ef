--[[
  The `auto` fetcher, the rule (issue 42): pure functions in the RULE namespace, no key read
  or written. auto.lua (claim-1.lua's lease, settle-1.lua's items) reads the domain's fields,
  calls them and writes what they answer; tests/engine/test_auto_rule.py EVALs them with
  values directly.

  Levels, cheapest first (RULE.AUTO_RANK): http, impersonate, browser. A domain's level is its
  hash field `afl` (absent: http): what a fingerprint block moves, for all its pages. A path
  pattern of it (RULE.auto_pattern) may have a level of its own, `ap:<pattern>`: what a page
  that needs rendering moves, so a shop whose product pages are written by a script renders
  those and not its static ones. `acn` counts its auto jobs claimed above http.

  RULE.auto_pattern(url) -> the URL's path pattern: its first path segment, with a '/' after
    it when the path goes on ('/p/' for /p/12 and /p/13?x=1, '/about' for /about, '/' for /)
  RULE.auto_pick(level, base, count, share) -> fetcher, count'
    the fetcher a claimed auto job goes through now: `level` (its pattern's, else its
    domain's `base`), but a share of the jobs claimed above http re-checks the cheaper fetcher
    (the domain's base when the pattern is above it, else the level one below): count' =
    count + 1, and the job whose count' crosses a multiple of 1/share (floor(count' * share) >
    floor(count * share)) is that re-check (share 0.1: the 10th, 20th, ...: exact and
    deterministic). At http nothing is counted (count' = count). share 0: no re-checks.
  RULE.auto_step(level, used, evidence) -> level' or nil (no change)
    what an auto job's settle moves its domain to, from what the worker saw fetching it with
    `used` (the claim's choice) while the domain was at `level`:
      'block'   the fetch was refused as a fingerprint block (403, a TLS handshake refused):
                from http at http, impersonate
      'render'  the page needs rendering (the handler raised NeedsBrowser, or an --extract
                rule found nothing raw and something rendered): from below browser, browser
      'same'    a re-check: the cheaper fetcher's result was as good: down to `used`
    Anything else (a timeout, a 5xx: no evidence at all, never sent) changes nothing.
]]
--@include rules

RULE.AUTO_RANK = {http = 1, impersonate = 2, browser = 3}  --@once
RULE.AUTO_LEVELS = {'http', 'impersonate', 'browser'}  --@once
RULE.AUTO_EVIDENCE = {'block', 'render', 'same'}  --@once

function RULE.auto_pattern(url)
  local path = string.match(url, '^%a[%w+.%-]*://[^/?#]*(/[^?#]*)') or '/'
  local first, rest = string.match(path, '^(/[^/]*)(.*)$')
  if rest ~= '' and first ~= '/' then return first .. '/' end
  return first
end

function RULE.auto_pick(level, base, count, share)
  local rank = RULE.AUTO_RANK[level] or 1
  if rank == 1 then return 'http', count end
  local after = count + 1
  if share > 0 and math.floor(after * share + 1e-9) > math.floor(count * share + 1e-9) then
    local below = RULE.AUTO_RANK[base] or 1
    return RULE.AUTO_LEVELS[below < rank and below or rank - 1], after
  end
  return RULE.AUTO_LEVELS[rank], after
end

function RULE.auto_step(level, used, evidence)
  local at, by = RULE.AUTO_RANK[level] or 1, RULE.AUTO_RANK[used]
  if by == nil then return nil end
  if evidence == 'block' then
    if at == 1 and by == 1 then return 'impersonate' end
  elseif evidence == 'render' then
    if at < 3 and by < 3 then return 'browser' end
  elseif evidence == 'same' then
    if by < at then return used end
  end
  return nil
end
