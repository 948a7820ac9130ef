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

  A download whose sample charges its domain keeps its slot until its settle too, so that no
  further request goes to a failing or overloaded site before the settle told its breaker and
  its adaptive limit: the item's breaker input is a failure, it signals overload, or its
  latency would lower an adaptive domain's rate (adaptive_rule.lua, RULE.adaptive_charges:
  the rule asked, nothing recorded; the settle records the sample, once).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {items = [{id, token, latency?, failed?, overload?}]}
      latency   ms the download took; failed: its breaker input (true: a failure);
                overload: true, the site signalled overload. An item without any of them
                is given back as its lease allows (no sample: the caller judged it).

  Output: one integer per item: 1 its slot is given back (now, or by an earlier call for the
  same lease), 0 kept: the token no longer owns the job in flight (stale), it is its
  domain's probe, or its sample charges its domain.
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
--@include adaptive

local refused = arg_refusal(function()
  check_list(ARG.items, 'items', function(it)
    check_table(it)
    check_str(it.id, 'id')
    check_num(it.token, 'token', 0, math.huge)
    if it.latency ~= nil then check_ms(it.latency, 'latency') end
    if it.failed ~= nil then check_bool(it.failed, 'failed') end
    if it.overload ~= nil then check_bool(it.overload, 'overload') end
  end)
end)
if refused then return redis.error_reply(refused) end

-- Whether item it's sample charges the domain of its job (no sample: no).
local function charges(job, it)
  if it.latency == nil and it.failed == nil and it.overload == nil then return false end
  local state = it.latency ~= nil and adaptive_read(k_dom(job.domain)) or nil
  return RULE.adaptive_charges(state, {now = NOW, lat = it.latency,
    overload = it.overload == true, outcome = 'done', failed = it.failed,
    claimed = tonumber(job.claimed), min = CFG.conc_min, max = CFG.conc_max})
end

local out = {}
local freed = {}  -- domain -> slots given back by this call
for i, it in ipairs(ARG.items) do
  out[i] = 0
  if redis.call('ZSCORE', K.INFLIGHT, it.id) then
    local job = load_job(it.id)
    if job and job.token == it.token then
      if slot_given_back(job) then
        out[i] = 1
      elseif redis.call('HGET', k_dom(job.domain), 'probe') ~= job.id
          and not charges(job, it) then
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
