--[[
  Read-only: per-domain figures for `status`, `breakers` and `domains`.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {domains = [names]}  at most a few hundred per call

  Output: JSON text [{domain, state, ready, delayed, inflight, done, dead, enqueued,
    consecutive_failures, window, window_failures, window_calls, open_until, trips, delay_ms,
    concurrency, next_ms, dead_last_hour, dead_baseline, failures_last_hour,
    failures_baseline, adaptive, limit, interval_ms, baseline_ms, latency_ms}, ...]
    with revisit on, max_bytes set or such figures kept: revisit_load, revisit_pages,
    revisit_budget (the revisit budget, visits per domain-hour), freshness, revisits_skipped,
    bytes, skipped; with max_pages set or a cut counted: max_pages_skipped; with its own
    fetcher set (domain set --fetcher): fetcher; with a selector its browser pages wait for
    (domain set --browser-wait-for): browser_wait_for; fetcher auto (its own, or the
    setting's, or once decided, a path pattern's level alone included: includes/auto.lua):
    auto_fetcher (the domain's level) and auto_patterns ({pattern: level} of its path
    patterns with a level of their own).
    window: the breaker's last outcomes ('1' a failure), kept while it is open (the ones
    that tripped it); window_failures of its window_calls failed (the failure rate shown).
    *_last_hour, *_baseline: dead letters and failures charged to the breaker in the last
    hour and per hour before (domain.lua: count_hourly).
    concurrency is the cap in force (an adaptive domain's limit, rounded down); adaptive:
    whether it adapts; limit, interval_ms, baseline_ms, latency_ms: its adaptive state
    (includes/adaptive.lua; null when not learned yet).
    state reports 'half_open' for an open breaker whose cooldown is over.
]]
--@include common
--@include domain

local refused = arg_refusal(function() check_list(ARG.domains, 'domains', check_str) end)
if refused then return redis.error_reply(refused) end
-- fetcher auto: the domain's path patterns with a level of their own (ap:<pattern>)
local function auto_patterns(d)
  local found, cursor = {}, '0'
  repeat
    local page = redis.call('HSCAN', k_dom(d), cursor, 'MATCH', 'ap:*', 'COUNT', 100)
    cursor = page[1]
    for j = 1, #page[2], 2 do found[string.sub(page[2][j], 4)] = page[2][j + 1] end
  until cursor == '0'
  return found
end

local out = {}
for i, d in ipairs(ARG.domains) do
  local f = redis.call('HMGET', k_dom(d), 'state', 'inflight', 'delayed', 'done',
    'fails', 'win', 'open_until', 'trips', 'delay', 'conc', 'next', 'dcur', 'dc', 'dp', 'db',
    'alim', 'aivl', 'abase', 'alat', 'fcur', 'fc', 'fp', 'fb',
    'rvl', 'rvn', 'rvfw', 'rvw', 'rvskip', 'bytes', 'skipped', 'pgskip', 'fetcher', 'bwait',
    'afl')
  local state = f[1] or 'closed'
  local open_until = tonumber(f[7])
  if state == 'open' and open_until and open_until <= NOW then state = 'half_open' end
  if state ~= 'open' then open_until = nil end
  local win = f[6] or ''
  local _, window_failures = string.gsub(win, '1', '')
  out[i] = {
    domain = d, state = state,
    ready = redis.call('ZCARD', k_dq(d)), delayed = math.max(tonumber(f[3]) or 0, 0),
    inflight = math.max(tonumber(f[2]) or 0, 0), done = tonumber(f[4]) or 0,
    dead = redis.call('ZCARD', k_ddead(d)), enqueued = registry_enq(d),
    consecutive_failures = tonumber(f[5]) or 0, window = win,
    window_failures = window_failures, window_calls = #win,
    open_until = open_until or cjson.null, trips = tonumber(f[8]) or 0,
    delay_ms = tonumber(f[9]) or CFG.delay_ms, concurrency = tonumber(f[10]) or CFG.conc,
    next_ms = tonumber(f[11]) or 0,
    dead_last_hour = last_hour(f[12], f[13], f[14]), dead_baseline = tonumber(f[15]) or 0,
    failures_last_hour = last_hour(f[20], f[21], f[22]),
    failures_baseline = tonumber(f[23]) or 0,
  }
  -- its own fetcher (domain_set-1.lua), when one is set
  if f[32] then out[i].fetcher = f[32] end
  if f[33] then out[i].browser_wait_for = f[33] end
  -- fetcher auto: shown when the domain or the setting is auto, or when a level was decided
  -- (a crawl run with --fetcher auto leaves its patterns' levels whatever this setting says)
  local patterns = auto_patterns(d)
  if f[34] or f[32] == 'auto' or CFG.fetcher == 'auto' or next(patterns) then
    out[i].auto_fetcher, out[i].auto_patterns = f[34] or 'http', patterns
  end
  -- with an exit pool: the tier it fetches at (includes/exits.lua) and its benched exits
  if #CFG.exits > 0 then
    local x = redis.call('HGETALL', k_dexit(d))
    local tier, benched = 0, 0
    for j = 1, #x, 2 do
      if x[j] == 'tier' then
        tier = tonumber(x[j + 1]) or 0
      elseif string.sub(x[j], 1, 2) == 'b:' and (tonumber(string.match(x[j + 1], '^(%d+)')) or 0) > NOW then
        benched = benched + 1
      end
    end
    out[i].tier, out[i].benched_exits = tier, benched
  end
  -- revisit = on (includes/revisit.lua): its revisit load, pages tracked, estimated
  -- freshness (weighted), revisits not scheduled past max_bytes; bytes downloaded; follow-ups
  -- cut by max_bytes (skipped) and by max_pages (includes/enqueue.lua). Shown with revisit on
  -- or a budget set, and whenever the domain has such figures (a crawl's own settings)
  local r = {unpack(f, 24, 31)}
  if CFG.max_pages ~= cjson.null or r[8] then out[i].max_pages_skipped = tonumber(r[8]) or 0 end
  if CFG.rv or CFG.max_bytes ~= cjson.null or r[2] or r[6] or r[7] then
    local w = tonumber(r[4]) or 0
    out[i].revisit_load = tonumber(r[1]) or 0
    out[i].revisit_pages = tonumber(r[2]) or 0
    out[i].revisit_budget = CFG.rv_budget
    out[i].freshness = w > 0 and (tonumber(r[3]) or 0) / w or cjson.null
    out[i].revisits_skipped = tonumber(r[5]) or 0
    out[i].bytes = tonumber(r[6]) or 0
    out[i].skipped = tonumber(r[7]) or 0
  end
  local adaptive = adaptive_on(f[10])
  out[i].adaptive = adaptive
  if adaptive then
    out[i].concurrency = domain_cap(f[10], 'closed', f[16])
    out[i].limit = tonumber(f[16]) or adaptive_start()
    out[i].interval_ms = tonumber(f[17]) or 0
    out[i].baseline_ms = tonumber(f[18]) or cjson.null
    out[i].latency_ms = tonumber(f[19]) or cjson.null
  else
    out[i].limit, out[i].interval_ms = cjson.null, cjson.null
    out[i].baseline_ms, out[i].latency_ms = cjson.null, cjson.null
  end
end
if #out == 0 then return '[]' end
return cjson.encode(out)
