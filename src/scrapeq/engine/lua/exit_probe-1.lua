--[[
  End the rest of exits by hand (`scrapeq proxies probe`, issue 38 item 16): an exit that is
  down (resting, or its probe out) may carry a probe at the next claim, as when its cooldown
  ends (includes/exits.lua: its sq:{Q}:exits:down value becomes now; the probe's answer closes
  it, a failed probe rests it again and spends nothing of its job). An exit that is not down
  is left as it is. The (exit, domain) benches are left: a ban is that site's verdict on the
  pair, not the exit's rest.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {ids = [exit id, ...]}: 1 to 200 exit ids (12 hex digits, or 'direct'; the
             client names exits of its pool: an id no exit of this queue has is not down)

  Output: one word an id, in order: 'probe' (it was down: the next claim may send it a
  probe) or 'up' (it was not down).
  Errors, before anything is written: 'SQ_BAD_ARG ids...' (includes/check.lua) for ids that
  are not a list of 1 to 200 exit ids.
]]
--@include common
--@include exits

local refused = arg_refusal(function()
  check_list(ARG.ids, 'ids', function(id)
    if id ~= 'direct' then check_match(id, nil, '^' .. string.rep('%x', 12) .. '$', 'an exit id') end
  end)
  if #ARG.ids == 0 or #ARG.ids > 200 then refuse('ids', 'expected 1 to 200 exits', #ARG.ids) end
end)
if refused then return redis.error_reply(refused) end

local out = {}
for i, id in ipairs(ARG.ids) do
  if EX.down()[id] ~= nil then
    redis.call('HSET', K.EXITS_DOWN, id, NOW)
    EX.down_map[id] = tostring(NOW)
    redis.call('HSET', k_exit(id), 'state', 'open', 'open_until', NOW, 'probe', '')
    emit('exit_probe', '', string.format('exit %s: rest ended by hand; the next claim sends a '
      .. 'probe', id), {'exit', id})
    out[i] = 'probe'
  else
    out[i] = 'up'
  end
end
return out
