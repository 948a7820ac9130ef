--[[
  Read-only: the names of the domains in the registry (common.lua), a range of buckets at a
  time, for `domains`, `audit` and the Python API.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {from, to}  buckets from <= b < to (0 <= from < to <= 1,024)

  Output: the names in those buckets, in no order.

  Cost: O(to - from + the names returned): only the buckets sq:{Q}:regb says are not empty
  are read.
]]
--@include common

local refused = arg_refusal(function()
  check_int(ARG.from, 'from', 0, REGISTRY_BUCKETS)
  check_int(ARG.to, 'to', 0, REGISTRY_BUCKETS)
end)
if refused then return redis.error_reply(refused) end

local out = {}
local from = math.max(math.floor(tonumber(ARG.from) or 0), 0)
local to = math.min(math.floor(tonumber(ARG.to) or REGISTRY_BUCKETS), REGISTRY_BUCKETS)
local used = registry_buckets()
for b = from, to - 1 do
  if used[b] then
    for _, d in ipairs(redis.call('HKEYS', P .. 'reg:' .. b)) do out[#out + 1] = d end
  end
end
return out
