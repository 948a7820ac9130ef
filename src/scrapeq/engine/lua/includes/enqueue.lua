--[[
  Adding jobs: the body of enqueue-1.lua, shared with settle-1.lua (the follow-ups of a done
  job are enqueued by the call that settles it). Depends on common.lua, domain.lua, jobs.lua
  seen.lua and revisit.lua. A job spec is documented in enqueue-1.lua's header.

  check_spec(s) raises the refusal of a bad job spec (check.lua): call it on every spec a
    script may add, in the script's arg_refusal (check_list(ARG.jobs, 'jobs', check_spec)),
    and check_pid(pid, name) on ARG.pid.
  enqueue_check(specs) -> nil, or an error text: call it on every spec a script may add,
    after check_spec and before the script's first write (the seen-set's layout; seen.lua).
  enqueue_begin(specs, n) reserves n job ids (fresh_numbers) and reads the queue's
    fingerprint flag; enqueue_one(s) then adds one spec, answering as enqueue-1.lua does;
    enqueue_end() files the domains that got ready jobs and, when one of them is urgent
    (domain.lua: is_urgent), adds the call's one entry to the wake stream (sq:{Q}:wake,
    capped at one entry: idle workers block on it). Returns of enqueue_begin: whether
    the queue has had a unique enqueue.
  A spec with `parent` (a follow-up), or `capped`, is skipped as 'limit' (counted links:max_pages, and in
  its domain's hash `pgskip`) when its domain already has CFG.max_pages jobs enqueued (its
  count in the registry, common.lua), when that is set, and its URL is new (one the seen-set
  or a pending job has is answered as such); as 'limit' (counted links:max_bytes, and in the
  domain's `skipped`) when its domain downloaded CFG.max_bytes bytes. ENQ.cut then says
  which budget cut it (settle-1.lua answers it to the worker, for the parent's results line).
  With CFG.rv, a spec whose `lastmod` is newer than its URL's last visit (revisit.lua) is
  enqueued even when the seen-set has the URL; when a pending job holds its fingerprint
  (unique), that job is made due instead (ENQ.sooner) and the spec answered as its duplicate:
  a URL never gets a second pending job from a lastmod, however often a sitemap lists it.
  What became of the follow-ups is counted here, where it is decided, and added to the
  queue's stats by enqueue_end: links:queued (a job was made), links:seen (the seen-set or a
  pending job had the URL), links:max_pages (a new URL cut by max_pages).
]]
--@include revisit

local ENQ = {base = 0, next = 0, hold_all = false, touched = {}, links = {}, urgent = false}

local ENQ_UNIQUE = {'pending', 'seen'}  --@once

local function check_spec(s)
  check_table(s)
  check_str(s.url, 'url')
  check_str(s.domain, 'domain')
  check_str(s.lane, 'lane')
  check_int(s.off, 'off', -MAX_OFFSET_MS, MAX_OFFSET_MS)
  check_ms(s.delay, 'delay')
  check_int(s.max_attempts, 'max_attempts', 1, MAX_INT)
  if s.payload ~= nil then check_str(s.payload, 'payload', true) end
  if s.expires ~= nil then check_ms(s.expires, 'expires', 1) end
  if s.fp ~= nil then check_str(s.fp, 'fp') end
  if s.unique ~= nil then check_enum(s.unique, 'unique', ENQ_UNIQUE) end
  if s.seen ~= nil then check_in(s.seen, 'seen', check_seen_arg) end
  if s.depth ~= nil then check_int(s.depth, 'depth', 0, MAX_INT) end
  if s.parent ~= nil then check_str(s.parent, 'parent') end
  if s.parent_url ~= nil then check_str(s.parent_url, 'parent_url') end
  if s.request ~= nil then check_str(s.request, 'request') end  -- kept as text, never decoded
  if s.weight ~= nil then check_num(s.weight, 'weight', 1e-6, 1e6) end
  if s.lastmod ~= nil then check_int(s.lastmod, 'lastmod', 0, 4294967295) end
  if s.fetcher ~= nil then check_enum(s.fetcher, 'fetcher', FETCHERS) end
  if s.capped ~= nil then check_bool(s.capped, 'capped') end
  if s.at ~= nil then
    check_int(s.at, 'at', 0, MAX_INT)
    if s.unique ~= 'seen' or s.parent ~= nil then
      refuse('at', "is a known URL's, with unique = 'seen' and no parent", s.at)
    end
  end
  if s.succeeds ~= nil then
    check_str(s.succeeds, 'succeeds')
    if s.at == nil then refuse('succeeds', 'goes with at', s.succeeds) end
  end
end

-- The suffix of new ids: '.<partition>'.
local function check_pid(pid, name)
  check_match(pid, name, '^%.%d+$', "a partition suffix ('.<n>')")
end

local function enqueue_check(specs)
  local any_seen = false
  for _, s in ipairs(specs) do
    if s.seen then any_seen = true end  -- each checked by check_spec (check_seen_arg)
  end
  if any_seen then return seen_layout_error() end  -- the first one records the layout
  return nil
end

local function enqueue_begin(specs, n)
  local any_unique = false
  for _, s in ipairs(specs) do
    if s.unique then any_unique = true end
  end
  -- every job takes its free fingerprint once the queue has had a unique enqueue
  ENQ.hold_all = redis.call('HGET', K.META, 'uq') == '1'
  if any_unique and not ENQ.hold_all then
    redis.call('HSET', K.META, 'uq', 1)
    ENQ.hold_all = true
  end
  -- ids: 1,000 per ms of the server clock before the counter leads it (see fresh_numbers)
  if n > 0 then ENQ.next = fresh_numbers('seq', n, 1000) end
  return ENQ.hold_all
end

local function new_id()
  local hex = string.format('%x', ENQ.next)
  ENQ.next = ENQ.next + 1
  return string.char(96 + #hex) .. hex .. (ARG.pid or '')  -- pid: '.<partition>', or none
end

-- A follow-up past its domain's budget: 'max_pages' (jobs enqueued), 'max_bytes' (bytes
-- downloaded, counted by settle-1.lua), or nil.
-- `capped`: a spec that is not a follow-up counted the same way (the URLFrontier service's
-- discovered URLs), against the domain's own max_pages (`maxp` in its hash, set by
-- domain_set-1.lua: SetCrawlLimit) when it has one.
local function over_max_pages(s)
  if not s.parent and not s.capped then return nil end
  local cap = s.capped and tonumber(redis.call('HGET', k_dom(s.domain), 'maxp'))
  cap = cap or tonumber(CFG.max_pages)
  if cap and registry_enq(s.domain) >= cap then return 'max_pages' end
  cap = tonumber(CFG.max_bytes)
  if cap and (tonumber(redis.call('HGET', k_dom(s.domain), 'bytes')) or 0) >= cap then
    return 'max_bytes'
  end
  return nil
end

-- A known URL (`at`: the URLFrontier service's import of a URL its client already knows):
-- held back while a pending job has it ('dup:<id>': that job's lease settles it), unless
-- that job is `succeeds`, the job this one is the next visit of (settled in the same call:
-- the new job takes its fingerprint over, so the URL stays held); else it
-- joins the seen-set, and with at = 0 (never again) that is all ('known'); else a job due
-- at `at` (server ms): later is a delay, earlier an offset of its priority, so a URL due
-- long ago comes before one due just now, as the frontier API orders them.
local function enqueue_known(s)
  local holder = s.fp and ENQ.hold_all and redis.call('HGET', K.UNIQUE, s.fp)
  if holder and holder ~= s.succeeds then return 'dup:' .. holder end
  seen_add(s.seen)
  if s.at == 0 then return 'known' end
  if s.at > NOW then
    s.delay = math.min(s.at - NOW, MAX_MS)
  else
    s.off = s.off + math.max(s.at - NOW, -MAX_MS)
  end
  return ENQ.new_job(s, nil)
end

local function enqueue_spec(s)
  if CFG.politeness == 'ip' then s.domain = redis.call('HGET', K.HOSTS, s.domain) or s.domain end
  if s.at then return enqueue_known(s) end
  local hold_all = ENQ.hold_all
  local holder = s.fp and hold_all and redis.call('HGET', K.UNIQUE, s.fp)
  local over = over_max_pages(s)
  if over then
    if holder and s.unique then return 'dup:' .. holder end
    if s.seen and seen_has(s.seen) then return 'seen' end
    ENQ.cut = over
    -- the domain's count of new URLs cut, for `domains`: skipped (max_bytes), pgskip
    redis.call('HINCRBY', k_dom(s.domain), over == 'max_bytes' and 'skipped' or 'pgskip', 1)
    return 'limit'
  end
  local new = true
  if s.seen then new = seen_add(s.seen) end
  -- a sitemap's lastmod newer than the last visit: due now, past the seen-set; the URL's
  -- pending job is moved, never doubled
  local fresher = s.lastmod and CFG.rv and RV.fresher(s.url, s.lastmod)
  if holder and s.unique then
    if fresher then ENQ.sooner(holder, s.delay) end
    return 'dup:' .. holder
  end
  if not new and not fresher then return 'seen' end
  return ENQ.new_job(s, holder)
end

-- Make the job of spec s (its checks passed); holder: the job holding its fp, or nil (a spec
-- without uniqueness does not take over a fingerprint another job holds). A field of ENQ, not
-- a local: settle-1.lua, which includes this file, is near Lua 5.1's 200 locals.
function ENQ.new_job(s, holder)
  local hold_all = ENQ.hold_all
  local id = new_id()
  local job = {id = id, url = s.url, domain = s.domain, lane = s.lane, off = s.off,
    attempts = 0, max_attempts = s.max_attempts, throttles = 0, token = 0,
    created = NOW, eligible = NOW + s.delay, payload = s.payload,
    depth = s.depth, parent = s.parent, request = s.request, parent_url = s.parent_url,
    weight = s.weight, fetcher = s.fetcher}
  if s.expires then job.expires = NOW + s.expires end
  if s.fp and hold_all and not holder then
    redis.call('HSET', K.UNIQUE, s.fp, id)
    job.fp = s.fp
    if not s.unique then job.fpw = true end
  end
  registry_count(s.domain)
  redis.call('SADD', K.LANES, s.lane)
  stat('enqueued')
  stat('enqueued:' .. s.lane)
  if redis.call('HGET', k_dom(s.domain), 'state') == 'retired' then
    dead_letter(job, 'domain_unavailable', 'domain is retired', true)
    return 'dead:' .. id
  end
  if s.delay > 0 then
    put_delayed(job, job.eligible)
  else
    put_ready(job)
    ENQ.touched[s.domain] = true
    if is_urgent(job.eligible + job.off) then ENQ.urgent = true end
  end
  save_job(job)
  return id
end

-- A fresher lastmod for a URL whose pending job `id` holds its fingerprint: that job is due
-- at NOW + delay when it was due later (a revisit waits for days), as a job of the spec would
-- be; due now, it goes ready as an enqueued job does. Left as it is: a job ready already or
-- in flight, and one that has had an attempt, a throttle or a release (its backoff or its
-- Retry-After stands); one whose domain is retired or that expired is only given the time
-- (the next claim's promote_due ends it). A field of ENQ, not a local: settle-1.lua, which
-- includes this file, is near Lua 5.1's 200 locals.
function ENQ.sooner(id, delay)
  local at = NOW + delay
  local was = tonumber(redis.call('ZSCORE', K.DELAYED, id))
  if not was or was <= at then return end
  local job = load_job(id)
  if not job or (tonumber(job.attempts) or 0) > 0 or (tonumber(job.throttles) or 0) > 0
      or (tonumber(job.releases) or 0) > 0 then
    return  -- a corrupt text (the next claim dead-letters it), or a job that failed before
  end
  job.eligible = at
  if delay > 0 or redis.call('HGET', k_dom(job.domain), 'state') == 'retired'
      or (type(job.expires) == 'number' and job.expires <= NOW) then
    redis.call('ZADD', K.DELAYED, at, id)
  else
    redis.call('ZREM', K.DELAYED, id)  -- left delayed (housekeeping.lua: left_delayed)
    redis.call('HINCRBY', k_dom(job.domain), 'delayed', -1)
    stat('delayed:' .. job.lane, -1)
    put_ready(job)
    ENQ.touched[job.domain] = true
    if is_urgent(job.eligible + job.off) then ENQ.urgent = true end
  end
  save_job(job)
end

local function enqueue_one(s)
  local out = enqueue_spec(s)
  if s.parent then
    local kind = 'queued'
    if out == 'seen' or string.sub(out, 1, 4) == 'dup:' then
      kind = 'seen'
    elseif out == 'limit' then
      kind = ENQ.cut
    end
    ENQ.links[kind] = (ENQ.links[kind] or 0) + 1
  end
  return out
end

local function enqueue_end()
  for d in pairs(ENQ.touched) do refile(d) end
  ENQ.touched = {}
  for kind, n in pairs(ENQ.links) do stat('links:' .. kind, n) end
  ENQ.links = {}
  if ENQ.urgent then
    -- one entry a call, whatever its number of urgent jobs: idle workers block on it
    redis.call('XADD', K.WAKE, 'MAXLEN', 1, '*', 'at', NOW)
    ENQ.urgent = false
  end
end
