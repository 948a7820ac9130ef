--[[
  Read-only: the revisit state of pages (revisit = on), for `scrapeq job show` and
  `scrapeq domains URL` (issue 37). The rule's own functions read it (includes/revisit.lua:
  RV.where, RV.read; includes/revisit_rule.lua: RV.rate, RV.fresh), so nothing is
  re-predicted by the client.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {urls = [url, ...]}  at most 100, each a page of this partition

  Output: JSON text [{url, tracked}, ...]; a tracked page adds: last, due (s, its last visit
    and the next one scheduled), intervals (observed), changes (of them, those that ended
    changed), rate (its estimated changes per hour; null before any interval was observed),
    interval (s, the one scheduled), freshness (the expected time-averaged freshness at that
    interval, F(rate, 3600 / interval); null with no rate), now (s).

  Cost: one HGET a URL.
]]
--@include common
--@include domain
--@include revisit

local refused = arg_refusal(function()
  check_list(ARG.urls, 'urls', check_str)
  if #ARG.urls > 100 then refuse('urls', 'expected at most 100', #ARG.urls) end
end)
if refused then return redis.error_reply(refused) end
local now = math.floor(NOW / 1000)
local out = {}
for i, url in ipairs(ARG.urls) do
  local page = RV.read(RV.where(url))
  if page == nil then
    out[i] = {url = url, tracked = false}
  else
    local rate = RV.rate(page)
    local interval = math.max(page.due - page.last, 1)
    out[i] = {url = url, tracked = true, last = page.last, due = page.due, intervals = page.n,
      changes = page.x, rate = rate == nil and cjson.null or rate, interval = interval,
      freshness = rate == nil and cjson.null or RV.fresh(rate, 3600 / interval), now = now}
  end
end
return cjson.encode(out)
