--[[
  Move dead letters back to their domains' ready queues, a bounded slice per call.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {mode = 'ids' | 'domain' | 'all', ids?, domain?, reset = bool, limit}
      ids     dead letter ids (mode 'ids')
      reset   attempts start again from zero (throttles and releases always do)
      limit   at most this many jobs are moved by this call (modes 'domain' and 'all')
      offset  skip this many dead letters first (those a previous call could not replay)

  A replayed job keeps its lane and error history, is eligible now, loses its expiry, and
  gets one more attempt at least when its budget was spent. Corrupt dead letters (the raw
  text of a damaged job) cannot be replayed: they are skipped. A retired domain whose jobs are replayed is un-retired
  (breaker reset): replaying is the operator saying "try this site again".

  A dead letter enqueued with uniqueness whose fingerprint a pending job holds now (the URL
  was enqueued again after it died) is not replayed: two pending jobs for one URL would break
  uniqueness. It stays a dead letter and is reported as a duplicate. A dead letter that held
  its fingerprint without asking for uniqueness (fpw, see enqueue-1.lua) is replayed either
  way and takes the fingerprint back only when no pending job holds it. The seen-set is not
  consulted: a replay is the same job again, not a new enqueue of its URL.

  Output: {moved, remaining, skipped, n_dups, dup_1, ..., dup_n, missing_1, ...}
    remaining  dead letters of the selection still after offset + skipped
               (modes 'domain' and 'all'); a caller paging through adds skipped to offset
    skipped    dead letters of this slice not replayed (corrupt payloads, duplicates)
    dup_i      dead letters not replayed because a pending job holds their fingerprint
    missing_i  ids (mode 'ids') that are not dead letters, or cannot be replayed (corrupt)

  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument, before any write.
]]
--@include common
--@include domain
--@include breaker
--@include jobs

local refused = arg_refusal(function()
  check_enum(ARG.mode, 'mode', {'ids', 'domain', 'all'})
  if ARG.mode == 'ids' then check_list(ARG.ids, 'ids', check_str) end
  if ARG.mode == 'domain' then check_str(ARG.domain, 'domain') end
  if ARG.reset ~= nil then check_bool(ARG.reset, 'reset') end
  if ARG.limit ~= nil then check_int(ARG.limit, 'limit', 1, MAX_INT) end
  if ARG.offset ~= nil then check_int(ARG.offset, 'offset', 0, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

-- Whether another job that is still pending holds fingerprint fp.
local function held_by_other(fp, id)
  local holder = redis.call('HGET', K.UNIQUE, fp)
  if not holder or holder == id then return false end
  return redis.call('EXISTS', k_job(holder)) == 1 and not redis.call('ZSCORE', K.DEAD, holder)
end

-- Replay one dead letter: 'moved', 'dup' (a pending job holds its fingerprint) or false.
local function replay_one(id, touched)
  if not redis.call('ZSCORE', K.DEAD, id) then return false end
  local job = load_job(id)
  if not job or job.corrupt then return false end
  local taken = job.fp and held_by_other(job.fp, id)
  if taken and not job.fpw then return 'dup' end
  redis.call('ZREM', K.DEAD, id)
  redis.call('ZREM', k_ddead(job.domain), id)
  job.dead_reason = nil
  job.died = nil
  job.throttles = 0
  job.releases = 0
  if ARG.reset then
    job.attempts = 0
  elseif job.attempts >= job.max_attempts then
    job.attempts = job.max_attempts - 1
  end
  job.eligible = NOW
  job.expires = nil
  if job.fp and not taken then redis.call('HSET', K.UNIQUE, job.fp, id) end
  if redis.call('HGET', k_dom(job.domain), 'state') == 'retired' then
    breaker_apply(job.domain, RULE.breaker_step({}, {ev = 'reset',
      why = 'un-retired: its dead letters were replayed'}, CFG, NOW))
  end
  put_ready(job)
  save_job(job)
  stat('replayed')
  touched[job.domain] = true
  return 'moved'
end

local touched = {}
local moved = 0
local dups, missing = {}, {}
local out = {0, 0, 0}
if ARG.mode == 'ids' then
  for _, id in ipairs(ARG.ids) do
    local done = replay_one(id, touched)
    if done == 'moved' then
      moved = moved + 1
    elseif done == 'dup' then
      dups[#dups + 1] = id
    else
      missing[#missing + 1] = id
    end
  end
else
  local key = K.DEAD
  if ARG.mode == 'domain' then key = k_ddead(ARG.domain) end
  local limit = tonumber(ARG.limit) or 100
  local skipped = 0
  local offset = tonumber(ARG.offset) or 0
  for _, id in ipairs(redis.call('ZRANGE', key, offset, offset + limit - 1)) do
    local done = replay_one(id, touched)
    if done == 'moved' then
      moved = moved + 1
    else
      skipped = skipped + 1
      if done == 'dup' then dups[#dups + 1] = id end
    end
  end
  out[2] = math.max(redis.call('ZCARD', key) - offset - skipped, 0)
  out[3] = skipped
end
for d in pairs(touched) do refile(d) end
out[1] = moved
out[4] = #dups
for _, id in ipairs(dups) do out[#out + 1] = id end
for _, id in ipairs(missing) do out[#out + 1] = id end
return out
