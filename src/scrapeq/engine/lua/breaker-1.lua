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
local f = redis.call('HMGET', k_dom(d), 'state', 'fails', 'win', 'probe', 'trips', 'open_until')
local new, e = RULE.breaker_step({state = f[1], fails = f[2], win = f[3], probe = f[4],
  trips = f[5], open_until = f[6]}, {ev = ARG.action, cool = tonumber(ARG.cool_ms)}, CFG, NOW)
if ARG.action == 'trip' then
  redis.call('SREM', K.RETIRING, d)
  redis.call('SREM', K.RETIRED, d)
end
breaker_apply(d, new, e)
if ARG.action == 'reset' then
  refile(d)
  return 'closed'
end
return 'open'
