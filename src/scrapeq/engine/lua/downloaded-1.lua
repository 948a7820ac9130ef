--[[
  Give back the domain slots of claimed jobs whose download is over, before their settle.

  A claimed job holds one of its domain's slots (its `inflight`, capped by the domain's
  limit) until it is settled. A client whose callback runs between the download and the
  settle (a Scrapy spider's parse) calls this when the download ends: the site sees no
  request of the job any more, so the slot goes to the domain's next job at once instead of
  after the callback. The job keeps its lease (renewed, reaped on expiry as ever) and is
  settled as usual; its settle, reap or forced cancel then frees no slot a second time (the
  job's field `sf` holds the token of the lease whose slot came back: domain.lua,
  slot_given_back).

  A half-open domain's probe keeps its slot until its settle: the probe's outcome decides the
  breaker, and a slot given back would let a second request go before that.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {items = [{id, token}]}

  Output: one integer per item: 1 its slot is given back (now, or by an earlier call for the
  same lease), 0 kept: the token no longer owns the job in flight (stale), or it is its
  domain's probe.
  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad item, before any write.

  A lease whose job text is gone (evicted) or damaged cannot say its slot came back: its reap
  (housekeeping.lua: reap_lost, dead_corrupt) frees one again, leaving the domain's counter one
  short until its next settle clamps it at 0 or `scrapeq audit --repair` sets it (check
  inflight_count).

  Cost: per item a ZSCORE, a GET and, when given back, a SET of the job; per domain one
  HINCRBY, and a refile when it has jobs queued.
]]
--@include common
--@include domain

local refused = arg_refusal(function()
  check_list(ARG.items, 'items', function(it)
    check_table(it)
    check_str(it.id, 'id')
    check_num(it.token, 'token', 0, math.huge)
  end)
end)
if refused then return redis.error_reply(refused) end

local out = {}
local freed = {}  -- domain -> slots given back by this call
for i, it in ipairs(ARG.items) do
  out[i] = 0
  if redis.call('ZSCORE', K.INFLIGHT, it.id) then
    local job = load_job(it.id)
    if job and job.token == it.token then
      if slot_given_back(job) then
        out[i] = 1
      elseif redis.call('HGET', k_dom(job.domain), 'probe') ~= job.id then
        job.sf = job.token
        save_claimed(job)
        freed[job.domain] = (freed[job.domain] or 0) + 1
        out[i] = 1
      end
    end
  end
end
for d, n in pairs(freed) do
  free_slots(d, n)
  -- with nothing queued there is nothing to dispatch, and refile would note the domain idle
  -- (to be forgotten after domain_ttl) while its job's callback still runs: its settle does
  if redis.call('EXISTS', k_dq(d)) == 1 then refile(d) end
end
return out
