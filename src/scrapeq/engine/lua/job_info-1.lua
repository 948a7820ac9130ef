--[[
  Read-only: where one job is, for `scrapeq job show` (one atomic look).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {id}

  Output: {now, place, score, position, depth, ttl_ms, text}
    place     the first that holds: 'inflight', 'dead', 'done' (a job kept by keep_done: its
              text has done_at), 'ready' (in its domain's queue), 'delayed'; 'unplaced' when
              the job key is in none of them (see `scrapeq audit`); 'unknown': no job key
    score     the place's score as text: lease deadline, time it died, priority (ready),
              eligible time (delayed); '' otherwise
    position  ready: 1-based rank in its domain's queue; else 0
    depth     ready: jobs in its domain's queue; else 0
    ttl_ms    PTTL of the job key (-1: no TTL)
    text      the stored job text ('' when unknown)

  Cost: O(log N): one GET, a few ZSCOREs, a ZRANK and a ZCARD.
]]
--@include common

local refused = arg_refusal(function() check_str(ARG.id, 'id') end)
if refused then return redis.error_reply(refused) end

local id = ARG.id
local raw = redis.call('GET', k_job(id))
if not raw then return {NOW, 'unknown', '', 0, 0, -2, ''} end
local job = load_job(id, raw)
local domain = job and job.domain or string.match(raw, '"domain"%s*:%s*"([^"]*)"')
local place, score, position, depth = 'unplaced', false, 0, 0
score = redis.call('ZSCORE', K.INFLIGHT, id)
if score then
  place = 'inflight'
else
  score = redis.call('ZSCORE', K.DEAD, id)
  if score then place = 'dead' end
end
if not score and job and job.done_at then
  place = 'done'
elseif not score and domain then
  score = redis.call('ZSCORE', k_dq(domain), id)
  if score then
    place = 'ready'
    position = redis.call('ZRANK', k_dq(domain), id) + 1
    depth = redis.call('ZCARD', k_dq(domain))
  end
end
if not score and place == 'unplaced' then
  score = redis.call('ZSCORE', K.DELAYED, id)
  if score then place = 'delayed' end
end
return {NOW, place, score or '', position, depth, redis.call('PTTL', k_job(id)), raw}
