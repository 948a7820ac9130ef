--[[
  politeness = ip: file a host under its address's group, learned by a worker's first fetch.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {host, key}  host: a domain key (host[:port]); key: 'ip:<address>'

  Output: the host's group key now: `key`, or the one it joined before (the first one
  learned stands, so every worker files the host's later jobs alike).

  Jobs enqueued from then on for the host (enqueue, follow-ups) are filed under the group
  (includes/enqueue.lua); jobs already queued keep the host's own key.
]]
--@include common

local refused = arg_refusal(function()
  check_str(ARG.host, 'host')
  check_str(ARG.key, 'key')
end)
if refused then return redis.error_reply(refused) end

local cur = redis.call('HGET', K.HOSTS, ARG.host)
if cur then return cur end
redis.call('HSET', K.HOSTS, ARG.host, ARG.key)
return ARG.key
