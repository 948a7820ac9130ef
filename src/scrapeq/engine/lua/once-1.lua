--[[
  A once-per-queue flag: the first caller of a name wins, every later caller is told it lost.

  What runs once for a whole crawl shared by several processes (the Scrapy scheduler's start
  requests, scrapeq.contrib.scrapy) asks here first: the check and the set are one step, so
  two processes starting together cannot both win. The flag lives with the queue's other
  keys: `scrapeq queue clear` removes it, and the next caller wins again.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {name, holder}
      name    the flag's name (letters, digits, '_', '-', '.', ':')
      holder  text kept as the flag's value (who won: host:pid)

  Keys: <prefix>once:<name> (string: the winner's holder text). Cost: O(1).

  Output: {won, holder}
    won     1: this call set the flag; 0: it was set before
    holder  the winner's holder text
]]
--@include common

local refused = arg_refusal(function()
  check_match(ARG.name, 'name', '^[%w_%-%.:]+$', "a flag name (letters, digits, '_-.:')")
  if ARG.holder ~= nil then check_str(ARG.holder, 'holder', true) end
end)
if refused then return redis.error_reply(refused) end
local key = P .. 'once:' .. ARG.name
local holder = tostring(ARG.holder or '')
if redis.call('SET', key, holder, 'NX') then
  return {1, holder}
end
return {0, redis.call('GET', key) or ''}
