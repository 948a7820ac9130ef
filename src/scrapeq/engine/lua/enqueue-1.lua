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
               depth    links followed from a seed (absent: 0, a seed)
               parent   id of the job whose page linked this one (absent for a seed)
               request  what the job sends (method, headers, body, cookies, meta) as JSON
                        text, kept verbatim like payload (absent: a plain GET of url;
                        scrapeq/engine/model/request.py); fp then covers method and body
               parent_url  that job's URL (absent for a seed; kept for its results line)
               at       a known URL (the URLFrontier service's import, unique = 'seen', no
                        parent): server time in ms of its next visit, 0 never again
                        (includes/enqueue.lua, enqueue_known); it replaces delay
               succeeds with at: the id of the job this is the next visit of (a settle's
                        follow-up): its held fingerprint is taken over, not a duplicate
               capped   true: counted against its domain's max_pages as a follow-up is
                        (the domain's own, set by domain_set-1.lua, else CFG.max_pages)

  Fingerprints (sq:{Q}:unique, fp -> id of the pending job holding it): a unique job takes
  its fp. Once the queue has had a unique enqueue (field 'uq' of sq:{Q}:meta, set here and
  never cleared), a job enqueued without uniqueness takes its fp too when no job holds it
  (kept in the job as fp, with fpw = true), so a later unique enqueue of its URL is a
  duplicate while it is pending; it is never skipped itself. Before that flag, such jobs
  take nothing: a queue that never asks for uniqueness pays nothing for it. A held
  fingerprint is released when its job is done or dead (jobs.lua, settle-1.lua).

  A unique = 'seen' job is checked against and added to the seen-set even when a pending
  job holds its fp (its URL has been enqueued); replaying a dead letter never consults it.

  A call that makes a job of the most urgent lane ready now (domain.lua: is_urgent) adds one
  entry to sq:{Q}:wake (a stream capped at one entry; scrapeq/engine/facades/wake.py): idle workers
  blocked on it claim at once. Other lanes and delayed jobs write nothing there.

  Job ids sort like their sequence numbers: the hex number prefixed by a letter for its
  length ('a1', 'b10', 'l1a2b3c4d5e6f'), so equal priorities are claimed in enqueue order
  (a zset orders equal scores by member). Numbers never repeat, even after Redis lost its
  last writes (fresh_numbers in includes/ids.lua).

  Output: one entry per input job, in order, then the flag:
    "<id>"          added
    "dup:<id>"      skipped (unique): a pending job with the same fingerprint exists (with
                    revisit on and a lastmod newer than the URL's last visit, that job is
                    made due at the spec's delay when it was due later: ENQ.sooner)
    "seen"          skipped (unique = 'seen'): the seen-set has the URL
    "dead:<id>"     added straight to the dead letters: its domain is retired
    "limit"         skipped (a follow-up, with parent): its domain has CFG.max_pages jobs
                    enqueued and its URL is new (includes/enqueue.lua)
    "known"         a known URL with at = 0: added to the seen-set, no job made
    flag            1 when the queue has had a unique enqueue (jobs without uniqueness
                    should carry fp from now on), else 0
    urgent...       the 1-based indexes of the jobs that made urgent work ready now
                    (domain.lua: is_urgent; an added job, or a duplicate made due now by
                    ENQ.sooner), in order: what a client keeping slots for urgent work
                    reads instead of guessing from lanes (contrib/scrapy/_frontier.py)

  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua, enqueue.lua: check_spec) for a job spec
  out of its range (delay, expires: up to 100 years; max_attempts >= 1; a seen-set bucket in
  0..2^32-1 ...), and 'SQ_SEEN_LAYOUT <stored> <given>' (seen.lua), both before anything is
  written.
]]
--@include common
--@include domain
--@include jobs
--@include seen
--@include enqueue

local refused = arg_refusal(function()
  check_list(ARG.jobs, 'jobs', check_spec)
  if ARG.pid ~= nil then check_pid(ARG.pid, 'pid') end
end)
if refused then return redis.error_reply(refused) end

local specs = ARG.jobs
refused = enqueue_check(specs)
if refused then return redis.error_reply(refused) end
local hold_all = enqueue_begin(specs, #specs)
local out, urgent = {}, {}
for i, s in ipairs(specs) do
  local before = ENQ.urgent  -- the call's flag, for the wake stream (enqueue_end)
  ENQ.urgent = false
  out[i] = enqueue_one(s)
  if ENQ.urgent then urgent[#urgent + 1] = i end
  ENQ.urgent = before or ENQ.urgent
end
enqueue_end()
out[#specs + 1] = hold_all and 1 or 0
for _, i in ipairs(urgent) do out[#out + 1] = i end
return out
