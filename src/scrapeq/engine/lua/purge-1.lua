--[[
  Delete dead letters, oldest first, a bounded slice per call.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {older_ms?, domain?, limit}
      older_ms  only dead letters that died at least this many ms ago (absent: all)
      domain    only this domain's dead letters

  Output: {purged, remaining}  remaining = matching dead letters left after this call
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument (older_ms: 0 to 100
  years), before any write.
]]
--@include common

local refused = arg_refusal(function()
  if ARG.older_ms ~= nil then check_ms(ARG.older_ms, 'older_ms') end
  if ARG.domain ~= nil then check_str(ARG.domain, 'domain') end
  if ARG.limit ~= nil then check_int(ARG.limit, 'limit', 1, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local max_score = '+inf'
if ARG.older_ms then max_score = NOW - ARG.older_ms end
local key = K.DEAD
if ARG.domain then key = k_ddead(ARG.domain) end
local limit = tonumber(ARG.limit) or 100
local ids = redis.call('ZRANGEBYSCORE', key, '-inf', max_score, 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  local raw = redis.call('GET', k_job(id))
  local ok, job = pcall(cjson.decode, raw or '')
  if ok then job = expand_job(job, id) end
  if ok and type(job) == 'table' and type(job.domain) == 'string' then
    redis.call('ZREM', k_ddead(job.domain), id)
    if job.fp and redis.call('HGET', K.UNIQUE, job.fp) == id then
      redis.call('HDEL', K.UNIQUE, job.fp)
    end
  end
  redis.call('ZREM', K.DEAD, id)
  if ARG.domain then redis.call('ZREM', key, id) end
  redis.call('DEL', k_job(id))
end
return {#ids, redis.call('ZCOUNT', key, '-inf', max_score)}
