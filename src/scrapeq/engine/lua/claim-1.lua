--[[
  Claim up to N jobs across domains, most urgent first.

  A claim answers at most CFG.claim_bytes of job texts (one job at least).

  Before picking, a claim does bounded housekeeping so its cost stays O(log D + batch):
  reaps up to `batch` expired leases, promotes up to `batch` due delayed jobs, wakes up to
  `batch` due domains, and dead-letters up to `batch` jobs of retired domains.
  Parked domains (open breaker, politeness slot, concurrency cap) are never touched.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON (conc, delay_ms, lease_ms, batch, ...)
    ARGV[3]  JSON {n = max jobs, seed = random seed, urgent = true (optional),
             domain = a domain (optional)}

  `domain`: claim only jobs of that domain, up to n, when it may dispatch now (it is in
  domains:ready: its politeness slot, concurrency cap and breaker allow it); nothing else
  (the URLFrontier service's GetURLs for one queue key).

  `urgent`: claim only jobs of the most urgent lane (domain.lua: is_urgent), none other: a
  client keeps a share of its slots for urgent work and fills it with such claims (Scrapy on
  scrapeq: contrib/scrapy/_frontier.py). Without it, a claim takes every lane, most urgent
  first, as before.

  Each claimed job carries `line_waits` when its done line waits for its settle's answer
  ('always' or 'follow': includes/lines.lua, RULE.line_waits; absent: it does not).
  Each claimed job carries `domain_fetcher`, its domain's fetcher (domain_set-1.lua), and
  `domain_wait_for`, the selector the browser fetcher waits for, when the domain has one.
  A job whose fetcher is `auto` (its own, else its domain's, else CFG.fetcher) carries
  `auto_fetcher`, the fetcher it goes through now, and `auto_level`, its domain's (includes/
  auto.lua decides both: the worker never does).

  With an exit pool (CFG.exits), each claimed job carries `exit`, the id of the exit it is
  fetched through (includes/exits.lua); a domain with no usable exit waits; when every exit
  of the pool is down nothing is claimed (next_ms: until the first may carry a request).

  Output: {next_ms, job_json_1, ..., job_json_k}
    next_ms  ms until the next known due time (delayed job, waiting domain or end of a
             global pause); -1 when nothing is scheduled. 0 when jobs are ready now.
    job_json the claimed job with its new token and attempts (attempts counts this one)

  Errors: 'SQ_BAD_ARG n: ...' (includes/check.lua) unless 1 <= n <= 1,000.
]]
--@include common
--@include domain
--@include jobs
--@include housekeeping
--@include exits
--@include auto
--@include lines

local MAX_CLAIM = 1000  -- scrapeq/engine/queue.py's MAX_CLAIM: tokens are reserved n a call
local refused = arg_refusal(function()
  check_int(ARG.n, 'n', 1, MAX_CLAIM)
  if ARG.urgent ~= nil then check_bool(ARG.urgent, 'urgent') end
  if ARG.domain ~= nil then check_str(ARG.domain, 'domain') end
end)
if refused then return redis.error_reply(refused) end

-- Fencing tokens: the batch reserves N at its first lease (gaps are fine: tokens only grow),
-- 100 per ms of the server clock before the counter leads it (see fresh_numbers).
local TOKENS = {next = 0, last = -1}
local function next_token()
  if TOKENS.next > TOKENS.last then
    local n = tonumber(ARG.n) or 1
    TOKENS.next = fresh_numbers('token', n, 100)
    TOKENS.last = TOKENS.next + n - 1
  end
  local token = TOKENS.next
  TOKENS.next = token + 1
  return token
end

-- One ZADD of a claim's leased ids to the inflight set, every one at `deadline` (calls.lua:
-- zadd_skiplist, so a settle's ZREMs find their leases by hash), sent in descending id
-- order: in a list set (a claim of a few, or a server whose lists take longer members),
-- members of one score stand in id order, so each lands at the head of its score's run
-- instead of after every lease of the claim. The set is the same in any order (BENCHMARKS
-- section 33).
local function add_inflight(ids, deadline)
  table.sort(ids)
  local args, n = {}, #ids
  for i = 1, n do
    args[2 * i - 1] = deadline
    args[2 * i] = ids[n + 1 - i]
  end
  zadd_skiplist(K.INFLIGHT, n, args)
end

-- Leases of this claim not written yet: one ZADD inflight (LEASES.inflight: their ids, every
-- one at the claim's lease deadline: add_inflight),
-- one MSET of the job texts (LEASES.mset: key, text, ...), one HSET of each lease's domain
-- (LEASES.doms: id, domain, ...: a reap frees the slot even when the job key is gone) and
-- one count per lane (LEASES.lanes[lane]: ids, lanes in LEASES.order; lane_served) for the
-- whole claim (flush_leases). Nothing in
-- the claim reads them back but a second sight of a leased id (LEASES.ids; only a corrupt
-- store files an id under two domains), which flushes them first.
local LEASES = {ids = {}, inflight = {}, mset = {}, lanes = {}, order = {}, doms = {}}

local function flush_leases()
  local l = LEASES
  if #l.inflight == 0 then return end
  add_inflight(l.inflight, NUMTEXT.of(NOW + CFG.lease_ms))
  for _, lane in ipairs(l.order) do lane_served(lane, #l.lanes[lane]) end
  call_many('MSET', nil, l.mset)
  call_many('HSET', K.LEASED, l.doms)
  LEASES = {ids = {}, inflight = {}, mset = {}, lanes = {}, order = {}, doms = {}}
end

-- Lease one job: attempt spent, fresh token, lease deadline. The domain's counters are
-- updated once per run by take_run, the job's places once per claim by flush_leases.
-- Bytes of job texts this claim answers so far: a claim stops at CFG.claim_bytes (after one
-- job at least), so its reply arrives well within the client's socket timeout.
local CLAIMED_BYTES = 0
local CLAIM_BYTES = tonumber(CFG.claim_bytes) or math.huge
-- whether a done page's results line waits for its settle's answer (includes/lines.lua)
local LINE_WAITS = RULE.line_waits(CFG)

-- The numbers every claimed job carries are written into its text by claimed_text: cjson
-- formats each through snprintf's '%.14g' (~3,000 instructions a number, 7 a job); an
-- integer below 10^14 (all of them, in practice) has the same text through '%d' at half
-- that, and the ones alike in a call are formatted once: the claim time and lm (SPLICE.tail),
-- attempts and max_attempts (SPLICE.memo), an eligible time equal to the created time.
local SPLICE = {memo = {}, tail = nil}

-- The full form of a claimed job (lease: after its claim time and lm are set), the text
-- cjson.encode(job) writes: the same fields and values (the order of an object's fields is
-- no part of JSON), the seven numbers above written here, the rest by cjson. Unless every one
-- of them is an integer below 10^14, cjson writes it all, as before.
local function claimed_text(job)
  local t, c, e, a, m = job.token, job.created, job.eligible, job.attempts, job.max_attempts
  if type(c) ~= 'number' or t % 1 ~= 0 or c % 1 ~= 0 or e % 1 ~= 0 or a % 1 ~= 0
      or m % 1 ~= 0 or t >= 1e14 or t <= -1e14 or c >= 1e14 or c <= -1e14 or e >= 1e14
      or e <= -1e14 or a >= 1e14 or a <= -1e14 or m >= 1e14 or m <= -1e14 then
    return cjson.encode(job)
  end
  local tail = SPLICE.tail
  if not tail then
    if NOW % 1 ~= 0 or CFG.lease_ms % 1 ~= 0 or NOW >= 1e14 or CFG.lease_ms >= 1e14 then
      return cjson.encode(job)
    end
    tail = string.format(',"claimed":%d,"lm":%d', NOW, CFG.lease_ms)
    SPLICE.tail = tail
  end
  local memo = SPLICE.memo
  local ta, tm = memo[a], memo[m]
  if not ta then
    ta = string.format('%d', a)
    memo[a] = ta
  end
  if not tm then
    tm = string.format('%d', m)
    memo[m] = tm
  end
  local tc = string.format('%d', c)
  local te = e == c and tc or string.format('%d', e)
  job.token, job.created, job.eligible, job.attempts, job.max_attempts = nil, nil, nil, nil, nil
  job.claimed, job.lm = nil, nil
  local rest = cjson.encode(job)
  local head = '{"token":' .. string.format('%d', t) .. ',"created":' .. tc .. ',"eligible":'
    .. te .. ',"attempts":' .. ta .. ',"max_attempts":' .. tm .. tail
  if rest == '{}' then return head .. '}' end
  return head .. ',' .. string.sub(rest, 2)
end

local function lease(job, probe, plan, fetcher, wait_for)
  local l = LEASES
  job.exit = plan and EX.choose(plan, job.id) or nil  -- a reaped job's old exit is dropped
  job.domain_fetcher = fetcher or nil  -- the domain's own fetcher (domain_set-1.lua), if any
  job.domain_wait_for = wait_for or nil  -- and the selector its browser pages wait for
  if (job.fetcher or fetcher or CFG.fetcher) == 'auto' then RULE.auto_lease(job) end
  job.jar = plan and plan.jar or nil  -- session = sticky: the domain's cookie jar
  job.line_waits = LINE_WAITS  -- nil (absent): its line is written before its settle
  job.attempts = job.attempts + 1
  job.token = next_token()
  job.claimed = NOW
  job.lm = CFG.lease_ms  -- the reap tells a lease never renewed by its claim-time deadline
  l.ids[job.id] = true
  l.inflight[#l.inflight + 1] = job.id
  l.doms[#l.doms + 1] = job.id
  l.doms[#l.doms + 1] = job.domain
  local lane_ids = l.lanes[job.lane]
  if not lane_ids then
    lane_ids = {}
    l.lanes[job.lane] = lane_ids
    l.order[#l.order + 1] = job.lane
  end
  lane_ids[#lane_ids + 1] = job.id
  if probe then  -- {domain, its breaker state}: the breaker rule records its probe
    local _, e = RULE.breaker_step({state = probe[2]}, {ev = 'claim', job = job.id}, CFG, NOW)
    redis.call('HSET', k_dom(probe[1]), unpack(e.write))
  end
  for i = 1, #ZERO_COUNTERS do  -- left out when 0: readers take them as 0 (codec.lua)
    if job[ZERO_COUNTERS[i]] == 0 then job[ZERO_COUNTERS[i]] = nil end
  end
  local encoded = claimed_text(job)
  CLAIMED_BYTES = CLAIMED_BYTES + #encoded
  l.mset[#l.mset + 1] = k_job(job.id)
  l.mset[#l.mset + 1] = encoded
  return encoded
end

-- A popped id that cannot be claimed: orphan, corrupt or expired. The job when claimable.
-- `raw`: its stored text read ahead (false: missing or not a string; read again here).
local function claimable(id, d, raw)
  local job
  -- a job stored without its domain is in its URL's host's queue: d, not parsed again
  job, raw = load_job(id, raw or nil, d)
  if job == nil then
    stat('orphans')  -- its lane is unknown: its lane's ready counter is left to the audit
    return nil
  elseif job == false then
    dead_corrupt(id, raw, d, 'ready')
    return nil
  end
  if expired(job) then
    lane_ready(job.lane, -1)
    dead_letter(job, 'expired', 'expired before it was claimed')
    return nil
  end
  return job
end

-- The ids of the current run taken from the domain's zset so far beyond the first (which
-- ZPOPMIN removed): removed in one ZREM when the run ends (flush_run).
local RUN = nil

local function flush_run()
  if RUN and RUN.upto >= 2 then
    local taken = {}
    for i = 2, RUN.upto do taken[#taken + 1] = RUN.ids[i] end
    call_many('ZREM', RUN.key, taken)
  end
  RUN = nil
end

-- The ids of a domain's run out of its queue dq: its head, popped, and up to budget - 1 more
-- due by `bound` (left in dq: RUN, whose flush_run removes the ones the claim went through);
-- with more than one, their texts read ahead with one MGET. Nil when dq is empty.
local function run_ids(dq, budget, bound)
  local popped = redis.call('ZPOPMIN', dq)
  if #popped == 0 then return nil end
  local ids = {popped[1]}
  if budget > 1 then
    local rest = redis.call('ZRANGEBYSCORE', dq, '-inf', bound, 'LIMIT', 0, budget - 1)
    for i = 1, #rest do ids[i + 1] = rest[i] end
  end
  local raws = {}  -- a lone id is read by claimable itself
  if #ids > 1 then
    local keys = {}
    for i = 1, #ids do  -- numeric fors over a run's ids: ipairs is a call an id
      local id = ids[i]
      if LEASES.ids[id] then flush_leases() end
      keys[i] = k_job(id)
    end
    raws = call_many('MGET', nil, keys)
    RUN = {key = dq, ids = ids, upto = 1}
  elseif LEASES.ids[ids[1]] then
    flush_leases()
  end
  return ids, raws
end

-- Take a run of jobs from domain d (the most urgent ready domain): as many as its free
-- slots and `room` allow while its head stays at least as urgent as `bound` (the next
-- domain's priority, a score string or '+inf'), so global priority order holds with one
-- refile per run. The head is always taken; the rest are the next members scored <= bound
-- (nothing in a run writes the domain's zset, so this is what popping one by one took).
-- `head`: d's score in domains:ready (its head job's priority). An adaptive domain with no
-- learned limit yet (no `alim`) whose head is urgent starts at urgent_start(), kept as its
-- limit (adaptive.lua goes on from it): a burst of critical work for a new site is not
-- served two at a time while its limit is learned.
-- Returns the domain fields refile reads, as they are after the run.
local function take_run(d, room, bound, out, head)
  local dk = k_dom(d)
  local f = redis.call('HMGET', dk, 'inflight', 'conc', 'delay', 'state', 'next', 'open_until',
    'alim', 'aivl', 'fetcher', 'climit', 'done', 'bwait')
  if not f[7] and adaptive_on(f[2]) and is_urgent(head) then
    f[7] = urgent_start()
    redis.call('HSET', dk, 'alim', f[7])
  end
  local state = f[4] or 'closed'
  local delay = tonumber(f[3]) or CFG.delay_ms
  if adaptive_on(f[2]) then delay = math.max(delay, math.floor(tonumber(f[8]) or 0)) end
  local budget = math.min(room, domain_cap(f[2], state, f[7]) - (tonumber(f[1]) or 0))
  if delay > 0 then budget = math.min(budget, 1) end
  local probes = RULE.breaker_budget(state)  -- the breaker's bound: half-open, one probe
  if probes then budget = math.min(budget, probes) end
  if f[10] then  -- a crawl limit: its jobs done and in flight count against it
    budget = math.min(budget, tonumber(f[10]) - (tonumber(f[11]) or 0) - (tonumber(f[1]) or 0))
  end
  -- inflight, next, state, open_until, conc, alim, climit, done
  local known = {f[1], f[5], f[4], f[6], f[2], f[7], f[10], f[11]}
  budget = math.floor(budget)
  if budget < 1 then return known end
  -- With an exit pool, each job goes through an exit usable for d (includes/exits.lua); when
  -- none is, d waits until the first may be usable again, at no cost to any other domain.
  local plan, back = nil, nil
  if #CFG.exits > 0 then
    plan, back = EX.plan(d)
    if not plan then
      known[2] = back or (NOW + CFG.ex_ban_ms)
      redis.call('HSET', dk, 'next', known[2])
      return known
    end
    local probes_only = true
    for _, e in ipairs(plan.list) do
      if not e.probe then probes_only = false end
    end
    if probes_only then budget = math.min(budget, #plan.list) end
  end
  local ids, raws = run_ids(k_dq(d), budget, bound)
  if not ids then return known end
  local leased = 0
  for i = 1, #ids do
    if i > 1 and CLAIMED_BYTES >= CLAIM_BYTES then break end  -- the rest stay queued
    if RUN then RUN.upto = i end
    local job = claimable(ids[i], d, raws[i])
    if job then
      out[#out + 1] = lease(job, probes and {d, state} or nil, plan, f[9], f[12])
      leased = leased + 1
    end
  end
  flush_run()
  if leased > 0 then
    known[1] = redis.call('HINCRBY', dk, 'inflight', NUMTEXT.of(leased))
    if delay > 0 then
      known[2] = NOW + delay
      redis.call('HSET', dk, 'next', known[2])
    end
  end
  return known
end

-- Jobs of one domain only, when it may dispatch now (ARG.domain).
local function pick_domain(d, n)
  local out = {}
  local head = redis.call('ZSCORE', K.READY, d)
  if not head then return out end
  local known = take_run(d, n, '+inf', out, head)
  refile(d, true, known)
  return out
end

local function pick(n)
  if ARG.domain then return pick_domain(ARG.domain, n) end
  zadd_skiplist(K.READY, n, {})  -- read and refiled at each visit, up to n of them
  local out = {}
  local guard = 0
  while #out < n and CLAIMED_BYTES < CLAIM_BYTES and guard < 2 * n + 50 do
    guard = guard + 1
    local top = redis.call('ZRANGE', K.READY, 0, 1, 'WITHSCORES')
    if #top == 0 then break end
    local d = top[1]
    local bound = top[4] or '+inf'
    if ARG.urgent then
      -- only the most urgent lane: stop at the first domain whose head is not of it, and
      -- take no job of another lane from this one
      if not is_urgent(top[2]) then break end
      local cut = NOW + CFG.urgent_ms
      if bound == '+inf' or tonumber(bound) > cut then bound = string.format('%.17g', cut) end
    end
    local known = take_run(d, n - #out, bound, out, top[2])
    refile(d, true, known)
  end
  return out
end

local paused = paused_until()
if paused then
  return {paused - NOW}
end
-- every exit of the pool down: the fault is ours (no site's), nothing is claimed until one
-- may carry a request again
local exits_back = EX.all_down()
if exits_back then
  return {exits_back - NOW}
end
housekeeping(CFG.batch)
local ok, jobs = pcall(pick, tonumber(ARG.n) or 1)
flush_run()
flush_leases()
if not ok then
  error(jobs, 0)  -- a Redis or Lua error: what was claimed before it stays claimed, as before
end
local result = {next_due_ms(#jobs > 0)}
for i = 1, #jobs do result[i + 1] = jobs[i] end
return result
