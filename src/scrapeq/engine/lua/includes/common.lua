--[[
  Shared prologue of every scrapeq script: includes every shared concern, in order.

  Calling convention of every script:
    KEYS[1]  key prefix of the queue, "sq:{<queue>}:" (every key of the queue starts with it,
             so all keys share one Redis Cluster hash slot)
    ARGV[1]  clock offset in ms added to the server's TIME (0 in production; tests move time)
    ARGV[2]  queue configuration, JSON (see scrapeq/scripts.py: ScriptConfig.to_json)
    ARGV[3]  the call's own arguments, JSON (documented in each script's header)

  Times are integer milliseconds of the Redis server clock.

  ARGV[1] and ARGV[2] are checked here (check.lua: decode_inputs), before anything else: a bad
  one is refused with SQ_BAD_ARG or SQ_BAD_CONFIG. Each script checks its ARGV[3] (ARG) next,
  before its first write.
]]
--@include prologue
--@include keys
--@include registry
--@include events
--@include ids
--@include codec
--@include calls
