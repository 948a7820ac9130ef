--[[
  A once-per-queue flag: the first caller of a name wins, every later caller is told it lost.

  What runs once for a whole crawl shared by several processes (the Scrapy scheduler's start
  requests, scrapeq.contrib.scrapy) asks here first: the check and the set are one step, so
  two processes starting together cannot both win. The flag lives with the queue's other
  keys: `scrapeq queue clear` removes it, and the next caller wins again.

  A flag may be leased: taken for lease_ms only, renewed by its holder while its work runs,
  then kept for good (renew with lease_ms 0) once the work is complete, or released when it
  was cut short. A holder that dies lets its lease run out: the next caller wins again.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {name, holder, op, lease_ms}
      name      the flag's name (letters, digits, '_', '-', '.', ':')
      holder    text kept as the flag's value (who won: host:pid)
      op        'take' (default): set the flag unless it is set;
                'renew': the holder's flag lasts lease_ms more (0: for good);
                'release': the holder's flag is removed;
                'peek': read only
      lease_ms  0 (default): no expiry; else the lease in ms (integer, at most 100 years)

  Keys: <prefix>once:<name> (string: the winner's holder text). Cost: O(1).

  Output: {won, holder, ttl_ms}
    won     1: this call set the flag (take), or the caller holds it (renew, release);
            0: otherwise (peek: always 0)
    holder  the holder's text ('' when the flag is not set after the call)
    ttl_ms  the flag's time left after the call: -1 kept for good, -2 not set

  Errors: SQ_BAD_ARG on a bad name, holder, op or lease_ms (nothing written).
]]
--@include common

local refused = arg_refusal(function()
  check_match(ARG.name, 'name', '^[%w_%-%.:]+$', "a flag name (letters, digits, '_-.:')")
  if ARG.holder ~= nil then check_str(ARG.holder, 'holder', true) end
  if ARG.op ~= nil then check_enum(ARG.op, 'op', {'take', 'renew', 'release', 'peek'}) end
  if ARG.lease_ms ~= nil then check_ms(ARG.lease_ms, 'lease_ms') end
end)
if refused then return redis.error_reply(refused) end
local op = ARG.op or 'take'
local lease = ARG.lease_ms or 0
local key = P .. 'once:' .. ARG.name
local holder = tostring(ARG.holder or '')

local function answer(won)
  return {won, redis.call('GET', key) or '', redis.call('PTTL', key)}
end

if op == 'take' then
  if lease > 0 then
    if redis.call('SET', key, holder, 'NX', 'PX', lease) then return answer(1) end
  elseif redis.call('SET', key, holder, 'NX') then
    return answer(1)
  end
  return answer(0)
end
if op == 'peek' or redis.call('GET', key) ~= holder then
  return answer(0)
end
if op == 'release' then
  redis.call('DEL', key)
elseif lease > 0 then
  redis.call('PEXPIRE', key, lease)
else
  redis.call('PERSIST', key)
end
return answer(1)
