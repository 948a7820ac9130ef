--[[
  Delete the queue's keys, one SCAN slice per call (`scrapeq queue clear`).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {cursor, count} or {markers = true}
      cursor   the SCAN cursor ('0' to start)
      count    SCAN's COUNT: about how many keys of the database one call looks at
      markers  delete the queue's marker keys (meta, stats, dcount, domains: what `Queue.exists`
               and `scrapeq queue list` look for) and nothing else

  Every key matching `<prefix>*` that this SCAN step returns, but the marker keys, is deleted
  with UNLINK: Redis frees a big sorted set or hash in the background instead of blocking on
  it. The caller repeats until the cursor is '0' again, then deletes the markers: a clear cut
  short leaves the queue listed, so it can be cleared again. Keys a running worker creates
  meanwhile may be left (the caller then sees the markers again and makes another pass).

  Output: {next cursor, keys deleted}
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument, before any write.

  Cost: one SCAN step (about `count` keys looked at) and one UNLINK of what it found.
]]
--@include common

local refused = arg_refusal(function()
  if ARG.markers ~= nil then check_bool(ARG.markers, 'markers') end
  if ARG.cursor ~= nil then check_match(ARG.cursor, 'cursor', '^%d+$', 'a SCAN cursor') end
  if ARG.count ~= nil then check_int(ARG.count, 'count', 1, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local MARKERS = {[P .. 'meta'] = true, [P .. 'stats'] = true, [P .. 'domains'] = true,
  [P .. 'dcount'] = true}

if ARG.markers then
  return {'0', redis.call('UNLINK', P .. 'meta', P .. 'stats', P .. 'domains', P .. 'dcount')}
end
local reply = redis.call('SCAN', ARG.cursor or '0', 'MATCH', P .. '*',
  'COUNT', tonumber(ARG.count) or 500)
local found = {}
for _, key in ipairs(reply[2]) do
  if not MARKERS[key] then found[#found + 1] = key end
end
local deleted = 0
for i = 1, #found, 500 do
  deleted = deleted + redis.call('UNLINK', unpack(found, i, math.min(i + 499, #found)))
end
return {reply[1], deleted}
