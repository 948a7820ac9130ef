--[[
  Settle many claimed jobs in one call: done, retry, throttle, fail or release.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {seed, items = [{id, token, outcome, domain_failed?, delay?, backoff?,
             retry_after?, kind?, message?, reason?, shutdown?, follow?, final_seen?, latency?,
             overload?, line?}]}
             (the wire names: includes/wire.lua, scrapeq/engine/lua/wire.py)
      outcome        'done' | 'retry' | 'throttle' | 'fail' | 'release'
      domain_failed  breaker input for the job's domain: true = a failure (timeout, 5xx, slow
              call), false = a success; absent = no information (released, our own fault, 404)
      delay   ms before the job is eligible again (retry, throttle, release)
      backoff true: no delay given (retry, release but a shutdown's); this script draws it,
              the full-jitter backoff of includes/jobs.lua (RULE.backoff_ms) over the attempts
              spent (retry) or the releases taken (release), and answers it
      retry_after    ms the whole domain is parked (Retry-After); throttle and retry
      kind    error kind kept in the history (retry, throttle, fail, release), e.g. 'http_503'
      message error message kept in the history; with domain_failed = true both are also kept
              among the domain's last errors (breaker.lua: note_failure)
      reason  dead-letter reason (fail), e.g. 'http_404'
      shutdown       true: a release because the worker is stopping (see below)
      latency ms the fetch took (adaptive domains learn from it: includes/adaptive.lua)
      overload       true: an overload signal (429, 503, timeout, reset); with latency
      exit    with a job claimed through an exit (its `exit`): what became of the attempt
              there: 'ok' an answer, 'ban' a ban of that exit by the site, 'down' the exit
              itself failed, 'timeout', 'error' (another failure of the site's); absent: no
              request was made (a shutdown, a sink failure). includes/exits.lua counts it,
              moves the exit's breaker and benches the pair; after a ban that leaves the
              domain no usable exit its breaker is charged (domain_failed = true).
      bytes   bytes downloaded (through the exit: counted per exit and per tier)
      jar     session = sticky: what the attempt changed in the domain's cookie jar,
              {set = [cookie...], del = [ [name, domain, path]... ]} (includes/jar.lua), merged
              into the stored jar when the job's exit is still the domain's session exit
      follow  with outcome = 'done': the job's follow-ups, job specs as enqueue-1.lua takes them
              (with depth and parent), enqueued by this call when the token owns the job:
              a crash never acks a parent without its children, and a stale settle adds
              none. Each goes through the de-duplication and seen-set of enqueue-1.lua
              (a retried parent's repeats are dropped there), and past CFG.max_pages jobs
              enqueued for its domain it is skipped; what became of each is counted in
              the stats links:queued, links:seen, links:max_pages (includes/enqueue.lua).
      not_modified, changed, signature, etag, last_modified   with outcome = 'done' and
              CFG.rv (revisit = on): what the fetch saw of the page's content, for its next
              visit (includes/revisit.lua): a 304 answer to the conditional request; the
              handler said unchanged (false) or changed (true); a 64-bit signature of the
              content (16 hex digits: of the body, or of what the handler said stands for
              it); the answer's validators (at most 100 bytes each)
      line    the attempt's results record (JSON text on one line, at most 4 MiB, never
              decoded here) when the worker writes the job's line from this call's answer:
              if the answer makes a line due ('done...', 'dead...'), the record and the answer
              are kept in the owed-lines ledger (includes/owed.lua) until the worker
              acknowledges the line (owed_ack-1.lua) or another worker takes it over
              (owed_take-1.lua), so a worker killed before its write loses no line.
      auto    with a job claimed with `auto_fetcher` (includes/auto.lua): what the worker
              saw of its fetcher: 'block' (refused as a fingerprint block: a 403, a TLS
              handshake refused), 'render' (the page needed rendering: it was rendered and
              done so), 'same' (a re-check: the cheaper fetcher's result was as good). A
              block that moves the domain, or of a job fetched below its domain's level,
              makes the item a give-back, as a failed exit probe's is.
      final_seen     with outcome = 'done': the seen-set argument of the URL the fetch ended
              at after redirects; it joins the seen-set (seen_mark: only when the queue has
              one) before the follow-ups are enqueued, so a link to it is skipped as seen.

  Done: the job key is deleted, or with CFG.keep_done_ms > 0 kept that long with `done_at`
  (SET ... PX); a kept job is in no other structure, and a later settle of it is stale.

  Release: no attempt spent. A release for our own fault (no shutdown) counts in job.releases and
  records kind (default 'released') and msg in the history; the release past CFG.max_releases
  dead-letters the job as 'max_releases'. The delay is the caller's, or with `backoff` a
  full-jitter backoff over job.releases drawn here. A shutdown release (shutdown = true)
  counts and records nothing; nor does the settle of a resting exit's probe that failed,
  whatever its outcome (includes/exits.lua, EX.settle_job: the exit's failure alone, the job
  goes back ready as it was).

  Output: one status per item, in order:
    'done' | 'retried' | 'throttled' | 'released' | 'dead' | 'stale'
    'done' is answered 'done:<name>=<n>,...' when this script decided something of the page
             the worker's results line says (includes/wire.lua, WIRE.DONE): with CFG.rv
             whether it changed (changed=1|0, not_modified=1), follow-ups cut at a budget
             (max_pages=n, max_bytes=n), its next visit not scheduled (revisit_skipped=1);
             the worker then writes the page's line from this answer.
    'dead' is answered 'dead:<reason>', the dead-letter reason this script gave (max_attempts,
             max_throttles, max_releases, or a fail's reason): whether a job ends dead is
             decided here alone, and the worker writes a results line from this answer.
    'retried' and 'released' of an item with `backoff` are answered '<status>:<delay ms>'.
    'stale': the token does not own the job (lease reaped and re-claimed, or already settled);
             nothing was changed for that item.

  Errors, each before anything is written: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) when
  an item is malformed (an unknown outcome, a delay or retry_after past 100 years, a bad follow-up
  spec or seen-set argument: enqueue.lua's check_spec, a line over 4 MiB or on more than one
  line: owed.lua's OWED.check): the whole batch is refused, so a
  client settles its items one by one to find it. 'SQ_SEEN_LAYOUT ...' (seen.lua) when a
  follow-up's seen-set argument does not match the queue's layout.
]]
--@include common
--@include tally
--@include domain
--@include breaker
--@include adaptive
--@include jobs
--@include seen
--@include enqueue
--@include wire
--@include exits
--@include revisit
--@include owed
--@include auto
--@include lines

-- An item's words: its outcomes and exit results (one local: the script's locals budget)
local ITEM = {outcomes = {'done', 'retry', 'throttle', 'fail', 'release'},
  exits = {'ok', 'ban', 'down', 'timeout', 'error'}}

local function check_item(it)
  check_table(it)
  check_str(it.id, 'id')
  check_num(it.token, 'token', 0, math.huge)
  check_enum(it.outcome, 'outcome', ITEM.outcomes)
  if it.domain_failed ~= nil and it.domain_failed ~= cjson.null then
    check_bool(it.domain_failed, 'domain_failed')
  end
  if it.delay ~= nil then check_ms(it.delay, 'delay') end
  if it.backoff ~= nil then check_bool(it.backoff, 'backoff') end
  if it.retry_after ~= nil then check_ms(it.retry_after, 'retry_after') end
  if it.latency ~= nil then check_ms(it.latency, 'latency') end
  if it.kind ~= nil then check_str(it.kind, 'kind', true) end
  if it.message ~= nil then check_str(it.message, 'message', true) end
  if it.reason ~= nil then check_str(it.reason, 'reason', true) end
  if it.shutdown ~= nil then check_bool(it.shutdown, 'shutdown') end
  if it.overload ~= nil then check_bool(it.overload, 'overload') end
  if it.exit ~= nil then check_enum(it.exit, 'exit', ITEM.exits) end
  if it.auto ~= nil then check_enum(it.auto, 'auto', RULE.AUTO_EVIDENCE) end
  if it.bytes ~= nil then check_int(it.bytes, 'bytes', 0, MAX_INT) end
  if it.jar ~= nil then check_in(it.jar, 'jar', JAR.check) end
  if it.follow ~= nil then check_list(it.follow, 'follow', check_spec) end
  if it.final_seen ~= nil then check_in(it.final_seen, 'final_seen', check_seen_arg) end
  if it.line ~= nil then
    check_str(it.line, 'line')
    OWED.check(it.line)
  end
  if it.not_modified ~= nil then check_bool(it.not_modified, 'not_modified') end
  if it.changed ~= nil then check_bool(it.changed, 'changed') end
  if it.signature ~= nil then
    check_match(it.signature, 'signature', '^' .. string.rep('%x', 16) .. '$', '16 hex digits')
  end
  -- validators: at most 100 bytes each (the worker sends none longer)
  if it.etag ~= nil then check_match(it.etag, 'etag', '^[^%c]+$', 'a header value') end
  if it.last_modified ~= nil then
    check_match(it.last_modified, 'last_modified', '^[^%c]+$', 'a header value')
  end
  if #(it.etag or '') > 100 then refuse('etag', 'at most 100 bytes', it.etag) end
  if #(it.last_modified or '') > 100 then
    refuse('last_modified', 'at most 100 bytes', it.last_modified)
  end
end

local refused = arg_refusal(function()
  check_list(ARG.items, 'items', check_item)
  if ARG.pid ~= nil then check_pid(ARG.pid, 'pid') end
end)
if refused then return redis.error_reply(refused) end
BRK.outcomes = #ARG.items

-- Follow-ups of the whole batch: checked before the first write, ids reserved at once.
do
  local FOLLOW = {}
  for n = 1, #ARG.items do  -- numeric fors over a batch's items: ipairs is a call an item
    local it = ARG.items[n]
    if type(it) == 'table' and type(it.follow) == 'table' then
      for _, s in ipairs(it.follow) do FOLLOW[#FOLLOW + 1] = s end
    end
  end
  if #FOLLOW > 0 then
    refused = enqueue_check(FOLLOW)
    if refused then return redis.error_reply(refused) end
    enqueue_begin(FOLLOW, #FOLLOW)
  end
end

local function park_domain(d, ra)
  if ra and ra > 0 then
    local dk = k_dom(d)
    local nxt = tonumber(redis.call('HGET', dk, 'next')) or 0
    if NOW + ra > nxt then redis.call('HSET', dk, 'next', NOW + ra) end
  end
end

-- Per-item writes of the batch that nothing later in it reads back, sent in one call per kind
-- by flush_items: a domain's inflight slots (INFLIGHT_LEFT, see domain.lua), the leases'
-- domains (DONE.leased: ids), deleting done jobs (DONE.keys) and releasing their
-- fingerprints (DONE.fps, each of job DONE.fp_ids[i]); and counted in the call's tally:
-- the done jobs by domain (DONE.by_domain) and by lane (DONE.by_lane), and
-- the history's outcomes by status and lane (DONE.history, history_settled's). The domains
-- settled, refiled at the end (DONE.touched).
local DONE = {keys = {}, fps = {}, fp_ids = {}, leased = {}, by_domain = {}, by_lane = {},
  history = {}, touched = {}}

local function flush_items()
  if #DONE.leased > 0 then
    call_many('HDEL', K.LEASED, DONE.leased)
    DONE.leased = {}
  end
  if #DONE.keys > 0 then
    call_many('DEL', nil, DONE.keys)
    DONE.keys = {}
  end
  if #DONE.fps > 0 then
    -- Settling only ever deletes fingerprints, each when still its own job's: order-free.
    local held = call_many('HMGET', K.UNIQUE, DONE.fps)
    local drop = {}
    for i, fp in ipairs(DONE.fps) do
      if held[i] == DONE.fp_ids[i] then drop[#drop + 1] = fp end
    end
    if #drop > 0 then call_many('HDEL', K.UNIQUE, drop) end
    DONE.fps, DONE.fp_ids = {}, {}
  end
  for d, n in pairs(INFLIGHT_LEFT) do
    INFLIGHT_LEFT[d] = nil
    free_slots(d, n)
  end
  -- the counts of the items settled, in the call's tally (written by TALLY.flush)
  -- (emptied in place: most flushes find nothing to count, and make no table)
  for d, n in pairs(DONE.by_domain) do
    TALLY.add(k_dom(d), 'done', n)
    DONE.by_domain[d] = nil
  end
  for lane, n in pairs(DONE.by_lane) do
    TALLY.add(K.STATS, 'done', n)
    TALLY.add(K.STATS, 'done:' .. lane, n)
    DONE.by_lane[lane] = nil
  end
  for status, lanes in pairs(DONE.history) do
    for lane, n in pairs(lanes) do history_settled(TALLY.add, status, lane, false, n) end
    DONE.history[status] = nil
  end
  BRK.flush()  -- the windows of the successes settled (includes/breaker.lua)
end

-- keep_done: a done job's key is kept DONE.keep_ms with `done_at` (one SET PX per job), so
-- `scrapeq job show` can say it is done; 0 (the default): deleted with the batch's one DEL.
DONE.keep_ms = tonumber(CFG.keep_done_ms) or 0

-- Answers 'done' and its notes (WIRE.DONE): the follow-ups cut at a budget, the revisit's;
-- no notes when the page's line did not wait for them (includes/lines.lua).
local function settle_done(job, it)
  if type(it.final_seen) == 'table' then seen_mark(it.final_seen) end
  local notes = {}
  if it.follow then
    for _, s in ipairs(it.follow) do
      -- cut at its domain's budget: ENQ.cut says which (max_pages, max_bytes)
      if enqueue_one(s) == 'limit' then notes[ENQ.cut] = (notes[ENQ.cut] or 0) + 1 end
    end
  end
  if CFG.rv then RV.settle(job, it, notes) end
  if DONE.keep_ms > 0 then
    job.done_at = NOW
    redis.call('SET', k_job(job.id), cjson.encode(job), 'PX', DONE.keep_ms)
  else
    DONE.keys[#DONE.keys + 1] = k_job(job.id)
  end
  if type(job.fp) == 'string' then
    DONE.fps[#DONE.fps + 1] = job.fp
    DONE.fp_ids[#DONE.fp_ids + 1] = job.id
  else
    release_unique(job)
  end
  DONE.by_domain[job.domain] = (DONE.by_domain[job.domain] or 0) + 1
  DONE.by_lane[job.lane] = (DONE.by_lane[job.lane] or 0) + 1
  return 'done', RULE.line_notes(CFG, it, notes)  -- answered when the line waits for them
end

local function settle_throttle(job, it)
  job.attempts = job.attempts - 1
  local spent = RULE.budget_spent(job, 'throttles')
  job.throttles = (job.throttles or 0) + 1
  park_domain(job.domain, it.retry_after)
  if spent then
    push_error(job, it.kind or 'throttled', it.message)
    dead_letter(job, 'max_throttles', nil)
    return 'dead'
  end
  push_error(job, it.kind or 'throttled', it.message)
  put_delayed(job, NOW + math.max(it.delay or 0, it.retry_after or 0))
  save_job(job)
  stat('throttled')
  return 'throttled'
end

-- back: the failed probe of a resting exit, given back as it was (EX.settle_job)
local function settle_release(job, it, back)
  job.attempts = math.max(job.attempts - 1, 0)
  if it.shutdown ~= true and not back then
    -- our own fault, again and again: bounded like throttles, so a job cannot loop forever
    local spent = RULE.budget_spent(job, 'releases')
    job.releases = (job.releases or 0) + 1
    push_error(job, it.kind or 'released', it.message)
    if spent then
      dead_letter(job, 'max_releases', nil)
      return 'dead'
    end
  end
  stat('released')
  if (it.delay or 0) > 0 then
    put_delayed(job, NOW + it.delay)
  else
    put_ready(job)
  end
  save_job(job)
  return 'released'
end

-- The batch's job texts are read with one MGET (PRE.raw), for the leading items whose id is a
-- string (all of them from scrapeq; PRE.n items). Within a batch only an item's own job can
-- change its job key, and a job named again after it left inflight is stale (PRE.gone), so
-- the texts read ahead are the current ones.
local PRE = {n = 0, raw = {}, gone = {}}
do
  local keys = {}
  for i = 1, #ARG.items do
    local it = ARG.items[i]
    if type(it) ~= 'table' or type(it.id) ~= 'string' then break end
    keys[i] = k_job(it.id)
  end
  PRE.n = #keys
  if PRE.n > 0 then PRE.raw = call_many('MGET', nil, keys) end
end

-- The job moved by the item's outcome, after its domain was charged: (status, notes).
local function settle_outcome(job, it, back)
  if it.backoff == true and it.shutdown ~= true then  -- the delay left to the queue
    if it.outcome == 'retry' then
      it.delay = RULE.backoff_ms(job.attempts)
    elseif it.outcome == 'release' then
      it.delay = RULE.backoff_ms((job.releases or 0) + 1)
    end
  end
  if it.outcome == 'done' then
    return settle_done(job, it)
  elseif it.outcome == 'retry' then
    park_domain(job.domain, it.retry_after)
    local delay = math.max(it.delay or 0, it.retry_after or 0)
    return retry_or_dead(job, delay, it.kind or 'error', it.message)
  elseif it.outcome == 'throttle' then
    return settle_throttle(job, it)
  elseif it.outcome == 'fail' then
    dead_letter(job, it.reason or it.kind or 'failed', it.message or '')
    return 'dead'
  end
  return settle_release(job, it, back)
end

local function settle_one(i, it)
  -- the job, when its token owns it and it is in flight; else stale, nothing changed
  local id = it.id
  local job
  if i > PRE.n then
    flush_items()  -- read item by item from here: the store must be current
    job = load_job(id)
  elseif PRE.gone[id] then
    return 'stale'
  else
    -- read ahead; false (missing, or not a string value) reads again: GET answers exactly
    job = load_job(id, PRE.raw[i] or nil)
  end
  if not job or job.token ~= it.token then return 'stale' end
  -- not in flight (reaped, or settled already): the ZREM changed nothing
  if redis.call('ZREM', K.INFLIGHT, id) == 0 then return 'stale' end
  PRE.gone[id] = true
  DONE.leased[#DONE.leased + 1] = id
  local d = job.domain
  -- its slot in the domain: subtracted by flush_items, or by refile if that reads it first
  -- (none when it was given back at its download's end: downloaded-1.lua)
  if lease_held_slot(job) then INFLIGHT_LEFT[d] = (INFLIGHT_LEFT[d] or 0) + 1 end
  -- the auto fetcher's evidence (includes/auto.lua), before the exit: a block may lift it
  local back = it.auto ~= nil and RULE.auto_settle(job, it)
  if job.exit ~= nil and EX.settle_job(job, it) then back = true end
  -- bytes downloaded per domain: what max_bytes caps (enqueue.lua, revisit.lua)
  if CFG.max_bytes ~= cjson.null and (it.bytes or 0) > 0 then
    redis.call('HINCRBY', k_dom(d), 'bytes', it.bytes)
  end
  -- may excuse an overload (then `it` is a throttle)
  it.domain_failed = adaptive_outcome(d, job, it)
  if it.domain_failed ~= nil and it.domain_failed ~= cjson.null then
    breaker_outcome(d, it.domain_failed, job.id, it.kind or it.reason or it.outcome, it.message)
  else
    probe_ended(d, job.id)
  end
  local status, notes = settle_outcome(job, it, back)
  DONE.touched[d] = true
  if (it.shutdown or back) ~= true then  -- the history's count (history_settled, at the end)
    local lanes = DONE.history[status]
    if not lanes then
      lanes = {}
      DONE.history[status] = lanes
    end
    lanes[job.lane] = (lanes[job.lane] or 0) + 1
  end
  if status == 'dead' then return 'dead:' .. job.dead_reason end
  if notes then return WIRE.done(notes) end
  if it.backoff == true and (status == 'retried' or status == 'released') then
    return status .. ':' .. it.delay
  end
  return status
end

local function settle_all()
  local out = {}
  for i = 1, #ARG.items do
    local it = ARG.items[i]
    out[i] = settle_one(i, it)
    if it.line then OWED.owe(it.id, out[i], it.line) end  -- a line due: owed until written
  end
  return out
end

local ok, out = pcall(settle_all)
flush_items()
enqueue_end()  -- the follow-ups of the items settled, even before an error
TALLY.flush()  -- and their counts (includes/tally.lua)
OWED.flush()  -- and the lines they made due (includes/owed.lua)
if not ok then
  error(out, 0)  -- a Redis or Lua error: the items settled before it stay settled, as before
end
for d in pairs(DONE.touched) do refile(d) end
return out
