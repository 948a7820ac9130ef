--[[
  Add a batch of jobs.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (seen_layout, seen_slice_ms: seen.lua)
    ARGV[3]  JSON {jobs = [{url, domain, lane, off, delay, max_attempts, payload?, expires?,
             fp?, unique?, seen?}, ...]}
               off      lane offset in ms (priority = eligible + off)
               delay    ms before the job is eligible (0: ready now)
               payload  the user's payload as JSON text (kept verbatim, never decoded here)
               expires  ms after enqueue at which a not-yet-claimed job dies as 'expired'
               fp       the URL's de-duplication fingerprint (16 hex characters)
               unique   'pending': skip the job while a pending job holds fp;
                        'seen': that, and skip it when the seen-set has the URL (seen_add);
                        absent: no de-duplication
               seen     with unique = 'seen': the seen-set argument (includes/seen.lua)

  Fingerprints (sq:{Q}:unique, fp -> id of the pending job holding it): a unique job takes
  its fp. Once the queue has had a unique enqueue (field 'uq' of sq:{Q}:meta, set here and
  never cleared), a job enqueued without uniqueness takes its fp too when no job holds it
  (kept in the job as fp, with fpw = true), so a later unique enqueue of its URL is a
  duplicate while it is pending; it is never skipped itself. Before that flag, such jobs
  take nothing: a queue that never asks for uniqueness pays nothing for it. A held
  fingerprint is released when its job is done or dead (jobs.lua, settle-1.lua).

  A unique = 'seen' job is checked against and added to the seen-set even when a pending
  job holds its fp (its URL has been enqueued); replaying a dead letter never consults it.

  Job ids sort like their sequence numbers: the hex number prefixed by a letter for its
  length ('a1', 'b10', 'l1a2b3c4d5e6f'), so equal priorities are claimed in enqueue order
  (a zset orders equal scores by member). Numbers never repeat, even after Redis lost its
  last writes (fresh_numbers in common.lua).

  Output: one entry per input job, in order, then the flag:
    "<id>"          added
    "dup:<id>"      skipped (unique): a pending job with the same fingerprint exists
    "seen"          skipped (unique = 'seen'): the seen-set has the URL
    "dead:<id>"     added straight to the dead letters: its domain is retired
    flag            1 when the queue has had a unique enqueue (jobs without uniqueness
                    should carry fp from now on), else 0

  Errors: 'SQ_SEEN_LAYOUT <stored> <given>' (seen.lua), before anything is written.
]]
--@include common
--@include domain
--@include jobs
--@include seen

local specs = ARG.jobs
local out = {}
local any_unique = false
for _, s in ipairs(specs) do
  if s.seen and seen_layout_error() then return redis.error_reply(seen_layout_error()) end
  if s.unique then any_unique = true end
end
-- every job takes its free fingerprint once the queue has had a unique enqueue
local hold_all = redis.call('HGET', K_META, 'uq') == '1'
if any_unique and not hold_all then
  redis.call('HSET', K_META, 'uq', 1)
  hold_all = true
end
-- ids: 1,000 per ms of the server clock before the counter leads it (see fresh_numbers)
local base = fresh_numbers('seq', #specs, 1000) - 1
local touched = {}
for i, s in ipairs(specs) do
  local holder = s.fp and hold_all and redis.call('HGET', K_UNIQUE, s.fp)
  local new = true
  if s.seen then new = seen_add(s.seen) end
  if holder and s.unique then
    out[i] = 'dup:' .. holder
  elseif not new then
    out[i] = 'seen'
  else
    local hex = string.format('%x', base + i)
    local id = string.char(96 + #hex) .. hex
    local job = {id = id, url = s.url, domain = s.domain, lane = s.lane, off = s.off,
      attempts = 0, max_attempts = s.max_attempts, throttles = 0, token = 0,
      created = NOW, eligible = NOW + s.delay, payload = s.payload}
    if s.expires then job.expires = NOW + s.expires end
    if s.fp and hold_all and not holder then
      redis.call('HSET', K_UNIQUE, s.fp, id)
      job.fp = s.fp
      if not s.unique then job.fpw = true end
    end
    redis.call('SADD', K_DOMAINS, s.domain)
    redis.call('SADD', K_LANES, s.lane)
    redis.call('HINCRBY', k_dom(s.domain), 'enq', 1)
    stat('enqueued')
    stat('enqueued:' .. s.lane)
    if redis.call('HGET', k_dom(s.domain), 'state') == 'retired' then
      dead_letter(job, 'domain_unavailable', 'domain is retired', true)
      out[i] = 'dead:' .. id
    else
      if s.delay > 0 then
        put_delayed(job, job.eligible)
      else
        put_ready(job)
        touched[s.domain] = true
      end
      save_job(job)
      out[i] = id
    end
  end
end
for d in pairs(touched) do refile(d) end
out[#specs + 1] = hold_all and 1 or 0
return out
