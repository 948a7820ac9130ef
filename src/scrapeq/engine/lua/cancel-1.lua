--[[
  Cancel pending jobs: each leaves every structure, its counters are fixed, its fingerprint is
  released, its job key deleted, and its domain is filed again. Counted in stats `cancelled`.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON, one of
      {mode = 'ids', ids, force}
        ids     job ids (the caller sends at most a few hundred a call)
        force   cancel jobs in flight too: the lease is dropped and the domain's slot freed at
                once; the worker's later heartbeat and settle find no job and are stale
      {mode = 'domain', domain, after, skip, limit}
        the domain's ready jobs (the head of dq:<domain>) first, then its delayed jobs; at
        most `limit` jobs examined this call. The delayed set is shared by every domain, so it
        is scanned in score order from the cursor (`after`: a score, '-inf' at first; `skip`:
        members of that score already passed), reading each job's domain from its text
        (without decoding it), at most about 8 MiB of job texts a call; the scan stops early
        once the domain's delayed counter reaches 0. Jobs in flight are never cancelled here.

  Output:
    mode 'ids': one status per id, in order:
      'cancelled' | 'inflight' (refused: no force) | 'dead' (a dead letter: purge it) |
      'done' (kept by keep_done) | 'unknown' (no job key) | 'corrupt' (see `scrapeq audit`)
    mode 'domain': {cancelled, ready_left, delayed_left, scan_end (0|1), after, skip, inflight}
      ready_left    jobs still in dq:<domain>
      delayed_left  the domain's delayed counter
      after, skip   the cursor the next call resumes the delayed scan from
      inflight      the domain's jobs in flight (left alone)

  Errors: 'SQ_UNKNOWN_DOMAIN <domain>' (mode 'domain') when the queue never had the domain;
  'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad argument, before any write.

  Cost: mode 'ids' O(ids * log N); mode 'domain' O(limit * log N), plus reading at most
  `limit` delayed job texts (about 8 MiB at most).
]]
--@include common
--@include domain
--@include jobs
--@include housekeeping

-- A score of the delayed set as the scan's cursor: '-inf', or a finite number's text.
local function check_cursor(v, name)
  check_match(v, name, '^[%d%.eE%+%-]+$', "'-inf' or a score")
  local n = tonumber(v)
  if v ~= '-inf' and (n == nil or n ~= n or n == math.huge or n == -math.huge) then
    refuse(name, "expected '-inf' or a score", v)
  end
end

local refused = arg_refusal(function()
  check_enum(ARG.mode, 'mode', {'ids', 'domain'})
  if ARG.mode == 'ids' then
    check_list(ARG.ids, 'ids', check_str)
    if ARG.force ~= nil then check_bool(ARG.force, 'force') end
    return
  end
  check_str(ARG.domain, 'domain')
  if ARG.after ~= nil and ARG.after ~= '-inf' then check_cursor(ARG.after, 'after') end
  if ARG.skip ~= nil then check_int(ARG.skip, 'skip', 0, MAX_INT) end
  if ARG.limit ~= nil then check_int(ARG.limit, 'limit', 1, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local TOUCHED = {}  -- domain -> jobs cancelled there by this call

-- Take a job out of every structure but inflight and forget it (`ready`: the caller took it
-- out of its ready queue already).
local function cancel_pending(job, ready)
  if redis.call('ZREM', K.DELAYED, job.id) == 1 then left_delayed(job) end
  if redis.call('ZREM', k_dq(job.domain), job.id) == 1 or ready then lane_ready(job.lane, -1) end
  redis.call('DEL', k_job(job.id))
  release_unique(job)
  stat('cancelled')
  TOUCHED[job.domain] = (TOUCHED[job.domain] or 0) + 1
end

local function cancel_id(id)
  local job = load_job(id)
  if job == nil then return 'unknown' end
  if job == false then return 'corrupt' end
  if job.done_at then return 'done' end
  if job.dead_reason or redis.call('ZSCORE', K.DEAD, id) then return 'dead' end
  if redis.call('ZSCORE', K.INFLIGHT, id) then
    if ARG.force ~= true then return 'inflight' end
    leave_inflight(job)
    local dk = k_dom(job.domain)
    if redis.call('HGET', dk, 'probe') == id then redis.call('HSET', dk, 'probe', '') end
  end
  cancel_pending(job)
  return 'cancelled'
end

local function cancel_ids()
  local out = {}
  for i, id in ipairs(ARG.ids) do out[i] = cancel_id(id) end
  return out
end

-- The domain's ready jobs, head first: at most `budget` examined. Returns how many were.
local function cancel_ready(d, budget)
  local taken = take_ready(d, budget, function(job, id)
    if job.domain == d then
      cancel_pending(job, true)
    else  -- filed under another domain: filed again under its own (as audit does)
      lane_ready(job.lane, -1)
      local placed = redis.call('ZSCORE', k_dq(job.domain), id)
        or redis.call('ZSCORE', K.DELAYED, id) or redis.call('ZSCORE', K.INFLIGHT, id)
        or redis.call('ZSCORE', K.DEAD, id)
      if not placed then put_ready(job) end
      TOUCHED[job.domain] = TOUCHED[job.domain] or 0
    end
  end)
  if taken > 0 then TOUCHED[d] = TOUCHED[d] or 0 end
  return taken
end

local SCAN_BYTES = 8 * 1024 * 1024

-- Delayed jobs of domain d from the cursor on, at most `budget` examined. Returns
-- (scan over, score, skip) for the next call.
local function cancel_delayed(d, budget, after, skip)
  local left = tonumber(redis.call('HGET', k_dom(d), 'delayed')) or 0
  if left <= 0 then return true, after, skip end
  if budget <= 0 then return false, after, skip end
  local page = redis.call('ZRANGEBYSCORE', K.DELAYED, after, '+inf', 'WITHSCORES', 'LIMIT',
    skip, budget)
  local ids = {}
  for i = 1, #page, 2 do ids[#ids + 1] = k_job(page[i]) end
  local texts = {}
  if #ids > 0 then texts = call_many('MGET', nil, ids) end
  -- a job of domain d names it in its text (its URL's host, or its domain field): texts
  -- that do not are skipped unread
  local bytes = 0
  for n = 1, #ids do
    if n > 1 and bytes >= SCAN_BYTES then return false, after, skip end
    local id, score, raw = page[2 * n - 1], page[2 * n], texts[n]
    local job = nil
    if raw and string.find(raw, d, 1, true) then job = load_job(id, raw) end
    if job and job.domain == d then
      cancel_pending(job)
      left = left - 1
    elseif score == after then
      skip = skip + 1
    else
      after, skip = score, 1
    end
    bytes = bytes + #(raw or '')
    if left <= 0 then return true, after, skip end
  end
  return #ids < budget, after, skip
end

local function cancel_domain()
  local d = ARG.domain
  if not registry_has(d) then
    return redis.error_reply('SQ_UNKNOWN_DOMAIN ' .. d)
  end
  local limit = tonumber(ARG.limit) or 500
  local examined = cancel_ready(d, limit)
  local over, after, skip = cancel_delayed(d, limit - examined, ARG.after or '-inf',
    tonumber(ARG.skip) or 0)
  local f = redis.call('HMGET', k_dom(d), 'delayed', 'inflight')
  local cancelled = 0
  for _, n in pairs(TOUCHED) do cancelled = cancelled + n end
  return {cancelled, redis.call('ZCARD', k_dq(d)), tonumber(f[1]) or 0, over and 1 or 0,
    after, skip, tonumber(f[2]) or 0}
end

local out
if ARG.mode == 'domain' then
  out = cancel_domain()
else
  out = cancel_ids()
end
for d, n in pairs(TOUCHED) do
  if n > 0 then emit('cancelled', d, string.format('%d pending jobs cancelled', n)) end
  refile(d)
end
return out
