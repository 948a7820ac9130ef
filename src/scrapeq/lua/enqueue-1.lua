--[[
  Add a batch of jobs.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {jobs = [{url, domain, lane, off, delay, max_attempts, payload?, expires?,
             fp?}, ...]}
               off      lane offset in ms (priority = eligible + off)
               delay    ms before the job is eligible (0: ready now)
               payload  the user's payload as JSON text (kept verbatim, never decoded here)
               expires  ms after enqueue at which a not-yet-claimed job dies as 'expired'
               fp       de-duplication fingerprint: skip the job while one with it is pending

  Job ids sort like their sequence numbers: the hex number prefixed by a letter for its
  length ('a1', 'b10', 'l1a2b3c4d5e6f'), so equal priorities are claimed in enqueue order
  (a zset orders equal scores by member). Numbers never repeat, even after Redis lost its
  last writes (fresh_numbers in common.lua).

  Output: one entry per input job, in order:
    "<id>"          added
    "dup:<id>"      skipped: a pending job with the same fingerprint exists
    "dead:<id>"     added straight to the dead letters: its domain is retired
]]
--@include common
--@include domain
--@include jobs

local specs = ARG.jobs
local out = {}
-- ids: 1,000 per ms of the server clock before the counter leads it (see fresh_numbers)
local base = fresh_numbers('seq', #specs, 1000) - 1
local touched = {}
for i, s in ipairs(specs) do
  local existing = s.fp and redis.call('HGET', K_UNIQUE, s.fp)
  if existing then
    out[i] = 'dup:' .. existing
  else
    local hex = string.format('%x', base + i)
    local id = string.char(96 + #hex) .. hex
    local job = {id = id, url = s.url, domain = s.domain, lane = s.lane, off = s.off,
      attempts = 0, max_attempts = s.max_attempts, throttles = 0, token = 0,
      created = NOW, eligible = NOW + s.delay, payload = s.payload, fp = s.fp}
    if s.expires then job.expires = NOW + s.expires end
    if s.fp then redis.call('HSET', K_UNIQUE, s.fp, id) end
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
return out
