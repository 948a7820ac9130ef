--[[
  Steer one domain's breaker by hand.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {domain, action = 'reset' | 'trip', cool_ms?, seed}
      reset    closed, counters cleared, a retired domain is un-retired
      trip     open now for cool_ms (default: the next cooldown); never retires the domain

  Output: the domain's new state ('closed' or 'open').
  Errors: 'SQ_UNKNOWN_DOMAIN <d>' when the queue never saw the domain; 'SQ_BAD_ARG <path>:
  ...' (includes/check.lua) for an argument out of its range (cool_ms: 0 to 100 years).
]]
--@include common
--@include domain
--@include breaker

local refused = arg_refusal(function()
  check_str(ARG.domain, 'domain')
  check_enum(ARG.action, 'action', {'reset', 'trip'})
  if ARG.cool_ms ~= nil then check_ms(ARG.cool_ms, 'cool_ms') end
end)
if refused then return redis.error_reply(refused) end

local d = ARG.domain
if not registry_has(d) then
  return redis.error_reply('SQ_UNKNOWN_DOMAIN ' .. d)
end
if ARG.action == 'reset' then
  close_breaker(d)
  emit('reset', d, 'breaker reset by hand')
  refile(d)
  return 'closed'
end
local trips = (tonumber(redis.call('HGET', k_dom(d), 'trips')) or 0) + 1
if trips >= CFG.max_trips then trips = math.max(CFG.max_trips - 1, 1) end
redis.call('SREM', K.RETIRING, d)
redis.call('SREM', K.RETIRED, d)
open_breaker(d, trips, tonumber(ARG.cool_ms)
  or RULE.backoff(CFG.cool_ms, CFG.cool_max_ms, trips, 'band'), 'tripped by hand')
return 'open'
