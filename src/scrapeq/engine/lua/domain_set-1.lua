--[[
  Set a domain's politeness overrides.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {domain, delay_ms?, conc?, fetcher?, max_pages?, until_ms?, climit?,
                   wait_for?}
      delay_ms  minimum ms between request starts; -1 restores the queue default
      conc      jobs in flight at once (>= 1), or 'auto' (adaptive: includes/adaptive.lua);
                -1 restores the queue default
      fetcher   'http', 'impersonate', 'browser' or 'auto' (the claim chooses one:
                includes/auto.lua): what fetches the domain's jobs that name none (a
                claim hands it to each job as domain_fetcher: claim-1.lua); -1: none (the
                worker's setting decides)
      max_pages the domain's own max_pages (0 to 10^14 - 1), for the specs enqueued
                `capped` (includes/enqueue.lua); -1 restores the queue's
      until_ms  server time in ms before which the domain dispatches nothing (its `next`,
                as a Retry-After parks it; a later `next` already set stays); 0 lifts
                such a wait now (the URLFrontier service's BlockQueueUntil)
      climit    the domain's crawl limit (1 to 10^14 - 1): once its jobs done (its `done`
                count) and in flight reach it, it dispatches nothing (refile parks it; its
                jobs stay queued); -1 removes it (the URLFrontier service's SetCrawlLimit)
      wait_for  a CSS selector the browser fetcher waits for on the domain's pages (a
                claim hands it to each job as domain_wait_for), 1 to 500 bytes; -1: none
      absent fields are left as they are

  Output: {delay_ms, conc, auto, fetcher, wait_for} now in force (the defaults when no
  override is set); auto is 1 when the domain's limit adapts (conc is then its limit now);
  fetcher and wait_for are the domain's own, '' when none.

  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument (delay_ms: -1 or 0
  to 100 years; conc: -1, 'auto' or 1 to 10^14 - 1; max_pages -1 or 0 to 10^14 - 1;
  until_ms 0 to 10^14 - 1; climit -1 or 1 to 10^14 - 1), before any write.
]]
--@include common
--@include domain

local refused = arg_refusal(function()
  check_str(ARG.domain, 'domain')
  if ARG.delay_ms ~= nil and ARG.delay_ms ~= -1 then check_ms(ARG.delay_ms, 'delay_ms') end
  local conc = ARG.conc
  if conc ~= nil and conc ~= 'auto' and conc ~= -1 and (type(conc) ~= 'number'
      or conc < 1 or conc > MAX_INT or conc ~= math.floor(conc)) then
    refuse('conc', "expected an integer in [1, " .. MAX_INT .. "], 'auto' or -1", conc)
  end
  if ARG.fetcher ~= nil and ARG.fetcher ~= -1 then check_enum(ARG.fetcher, 'fetcher', FETCHERS) end
  if ARG.max_pages ~= nil and ARG.max_pages ~= -1 then
    check_int(ARG.max_pages, 'max_pages', 0, MAX_INT)
  end
  if ARG.until_ms ~= nil then check_int(ARG.until_ms, 'until_ms', 0, MAX_INT) end
  if ARG.climit ~= nil and ARG.climit ~= -1 then check_int(ARG.climit, 'climit', 1, MAX_INT) end
  if ARG.wait_for ~= nil and ARG.wait_for ~= -1 then
    check_str(ARG.wait_for, 'wait_for')
    if #ARG.wait_for > 500 then refuse('wait_for', 'expected at most 500 bytes', #ARG.wait_for) end
  end
end)
if refused then return redis.error_reply(refused) end

local d = ARG.domain
local dk = k_dom(d)
registry_add(d)
if ARG.delay_ms then
  if ARG.delay_ms < 0 then redis.call('HDEL', dk, 'delay')
  else redis.call('HSET', dk, 'delay', math.floor(ARG.delay_ms)) end
end
if ARG.conc == 'auto' then
  redis.call('HSET', dk, 'conc', 'auto')
elseif ARG.conc then
  if ARG.conc < 0 then redis.call('HDEL', dk, 'conc')
  else redis.call('HSET', dk, 'conc', math.floor(ARG.conc)) end
end
if ARG.fetcher == -1 then
  redis.call('HDEL', dk, 'fetcher')
elseif ARG.fetcher then
  redis.call('HSET', dk, 'fetcher', ARG.fetcher)
end
if ARG.wait_for == -1 then
  redis.call('HDEL', dk, 'bwait')
elseif ARG.wait_for then
  redis.call('HSET', dk, 'bwait', ARG.wait_for)
end
if ARG.max_pages then
  if ARG.max_pages < 0 then redis.call('HDEL', dk, 'maxp')
  else redis.call('HSET', dk, 'maxp', ARG.max_pages) end
end
if ARG.climit then
  if ARG.climit < 0 then redis.call('HDEL', dk, 'climit')
  else redis.call('HSET', dk, 'climit', ARG.climit) end
end
if ARG.until_ms then
  local nxt = tonumber(redis.call('HGET', dk, 'next')) or 0
  if ARG.until_ms == 0 then
    if nxt > NOW then redis.call('HSET', dk, 'next', NOW) end
  elseif ARG.until_ms > nxt then
    redis.call('HSET', dk, 'next', ARG.until_ms)
  end
end
local f = redis.call('HMGET', dk, 'delay', 'conc', 'fetcher', 'bwait')
refile(d)
local auto = adaptive_on(f[2])
local alim = auto and redis.call('HGET', dk, 'alim') or nil
return {tonumber(f[1]) or CFG.delay_ms, domain_cap(f[2], 'closed', alim), auto and 1 or 0,
  f[3] or '', f[4] or ''}
