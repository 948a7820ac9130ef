--[[
  Shared prologue of every scrapeq script.

  Calling convention of every script:
    KEYS[1]  key prefix of the queue, "sq:{<queue>}:" (every key of the queue starts with it,
             so all keys share one Redis Cluster hash slot)
    ARGV[1]  clock offset in ms added to the server's TIME (0 in production; tests move time)
    ARGV[2]  queue configuration, JSON (see scrapeq/scripts.py: ScriptConfig.to_json)
    ARGV[3]  the call's own arguments, JSON (documented in each script's header)

  Times are integer milliseconds of the Redis server clock.

  ARGV[1] and ARGV[2] are checked here (check.lua: decode_inputs), before anything else: a bad
  one is refused with SQ_BAD_ARG or SQ_BAD_CONFIG. Each script checks its ARGV[3] (ARG) next,
  before its first write.
]]
--@include check
local P = KEYS[1]
local CFG, ARG, REFUSED = decode_inputs()
if REFUSED then return redis.error_reply(REFUSED) end

if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local NOW
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + (tonumber(ARGV[1]) or 0)
end

if ARG.seed then
  math.randomseed(ARG.seed)
end

local K_DELAYED = P .. 'delayed'
local K_READY = P .. 'domains:ready'
local K_WAIT = P .. 'domains:wait'
local K_DOMAINS = P .. 'domains'  -- the domain registry before it had buckets (registry_*)
local K_DCOUNT = P .. 'dcount'  -- the number of domains in the registry
local K_REGB = P .. 'regb'  -- the registry's buckets that are not empty
local K_INFLIGHT = P .. 'inflight'
local K_LEASED = P .. 'leased'  -- hash: id of a claimed job -> its domain
local K_DEAD = P .. 'dead'
local K_STATS = P .. 'stats'
local K_UNIQUE = P .. 'unique'
local K_HOSTS = P .. 'hosts'  -- politeness = ip: host -> group key (host_group-1.lua)
local K_EVENTS = P .. 'events'
local K_META = P .. 'meta'
local K_LANES = P .. 'lanes'
local K_LANE_SINCE = P .. 'lane-since'  -- lane -> ms (jobs.lua: lane_ready)
local K_TRIPS = P .. 'trips'
local K_ACTIVE = P .. 'active'
local K_RETIRING = P .. 'retiring'
local K_RETIRED = P .. 'retired'
local K_IDLE = P .. 'idle'  -- zset: domain -> when it was last seen idle (domain.lua)
local K_OPEN = P .. 'open'  -- set: domains whose breaker is open or half-open (breaker.lua)
local K_WAKE = P .. 'wake'  -- stream (one entry): urgent work was enqueued (enqueue.lua)

local function k_job(id) return P .. 'job:' .. id end
local function k_dq(d) return P .. 'dq:' .. d end
local function k_dom(d) return P .. 'domain:' .. d end
local function k_ddead(d) return P .. 'ddead:' .. d end
local function k_lane(l) return P .. 'lane:' .. l end

-- The domain registry: every domain the queue knows, with its count of jobs enqueued since it
-- was first seen (its `enq`), spread over REGISTRY_BUCKETS small hashes sq:{Q}:reg:<b> so each
-- stays in Redis's compact encoding (up to 128 fields, and names of at most 64 bytes: about
-- 100,000 domains a partition) at ~25 bytes a domain. A domain that only has jobs queued has
-- no hash of its own (domain.lua): the registry is all it costs beyond its ready queue. The
-- set sq:{Q}:regb holds the numbers of the buckets that are not empty, so a queue of few
-- domains is listed without reading every bucket. scrapeq/engine/keys.py's registry_bucket is
-- the same function.
--
-- A queue written before the registry had buckets keeps its domains in the set K_DOMAINS and
-- their counts in their hashes (`enq`): a domain moves to the registry when a script first
-- registers or counts it (registry_adopt), and the housekeeping of claims moves the rest
-- (housekeeping.lua: migrate_registry). Until then the readers here look at both.
local REGISTRY_BUCKETS = 1024
local REG_BUCKET = {}
local function registry_bucket(d)
  local b = REG_BUCKET[d]
  if b then return b end
  local h = 0  -- a polynomial hash modulo a prime (1,000,003): exact in Lua's doubles
  for i = 1, #d do h = (h * 31 + string.byte(d, i)) % 1000003 end
  b = h % REGISTRY_BUCKETS
  REG_BUCKET[d] = b
  return b
end
local function k_reg(d) return P .. 'reg:' .. registry_bucket(d) end

-- Whether the queue still has domains of the layout before the registry (once a call).
local LEGACY = nil
local function legacy_registry()
  if LEGACY == nil then LEGACY = redis.call('EXISTS', K_DOMAINS) == 1 end
  return LEGACY
end

local function registry_has(d)
  return redis.call('HEXISTS', k_reg(d), d) == 1
    or (legacy_registry() and redis.call('SISMEMBER', K_DOMAINS, d) == 1)
end

-- Put d in the registry (count 0) if it is not there; then, if `old`, move its `enq` there.
local function registry_adopt(d, old)
  if redis.call('HSETNX', k_reg(d), d, 0) == 1 then
    redis.call('INCR', K_DCOUNT)
    redis.call('SADD', K_REGB, registry_bucket(d))
  end
  if not old then return end
  local dk = k_dom(d)
  local enq = tonumber(redis.call('HGET', dk, 'enq'))
  if enq then
    redis.call('HINCRBY', k_reg(d), d, enq)
    redis.call('HDEL', dk, 'enq')
  end
end

-- Register d (its enq counter at 0) if it is new; once a call per domain.
local REG_KNOWN = {}
local function registry_add(d)
  if REG_KNOWN[d] then return end
  REG_KNOWN[d] = true
  registry_adopt(d, legacy_registry() and redis.call('SREM', K_DOMAINS, d) == 1)
end

-- Domain d's count of jobs enqueued (0 when unknown). Read only.
local function registry_enq(d)
  local n = tonumber(redis.call('HGET', k_reg(d), d)) or 0
  if legacy_registry() and redis.call('SISMEMBER', K_DOMAINS, d) == 1 then
    n = n + (tonumber(redis.call('HGET', k_dom(d), 'enq')) or 0)
  end
  return n
end

-- Count one job enqueued for d, registering it when new.
local function registry_count(d)
  registry_add(d)
  redis.call('HINCRBY', k_reg(d), d, 1)
end

local function registry_del(d)
  REG_KNOWN[d] = nil
  local key = k_reg(d)
  if redis.call('HDEL', key, d) == 0 then return end
  if redis.call('DECR', K_DCOUNT) <= 0 then redis.call('DEL', K_DCOUNT) end
  if redis.call('EXISTS', key) == 0 then redis.call('SREM', K_REGB, registry_bucket(d)) end
end

-- The numbers of the registry's buckets that are not empty, as a lookup table.
local function registry_buckets()
  local out = {}
  for _, b in ipairs(redis.call('SMEMBERS', K_REGB)) do out[tonumber(b)] = true end
  return out
end

local EVENTS_MAXLEN = 10000

-- Append an event to the capped stream: kind, domain, message and at (ms), then `extra`, a
-- list of more field/value pairs some kinds carry (retired: jobs). Readers that know only the
-- first four fields read every event as before.
local function emit(kind, domain, message, extra)
  if extra then
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*',
      'kind', kind, 'domain', domain or '', 'message', message or '', 'at', NOW, unpack(extra))
    return
  end
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*',
    'kind', kind, 'domain', domain or '', 'message', message or '', 'at', NOW)
end

local function stat(field, by)
  redis.call('HINCRBY', K_STATS, field, by or 1)
end

-- Numbers that must never repeat (fencing tokens, job ids) are the larger of the stored
-- counter and a floor from the server clock: `per_ms` numbers per millisecond since
-- 2026-01-01. A Redis that lost its last writes (AOF cut back, a failover to a replica that
-- lagged) restarts with an older counter, but its clock has moved on, so the floor is past
-- every number issued before the loss unless they were issued faster than `per_ms` on average.
-- Kept below 1e14: cjson and redis.call write numbers with 14 significant digits.
local NUMBERS_EPOCH_MS = 1767225600000

-- Reserve `n` fresh numbers of counter `field` in sq:{Q}:meta; returns the first.
local function fresh_numbers(field, n, per_ms)
  local stored = tonumber(redis.call('HGET', K_META, field)) or 0
  local floor = math.max(NOW - NUMBERS_EPOCH_MS, 0) * per_ms
  local first = math.max(stored, floor) + 1
  redis.call('HSET', K_META, field, string.format('%.0f', first + n - 1))
  return first
end

-- A job is stored compact (see jobs.lua's header): short field names, defaults left out, no
-- id (the key names it), no domain when it is the URL's host, created as ms after the time
-- its id was issued (id_ms; left out when 0), eligible as ms after created (left out when
-- 0), '/' not escaped. Scripts work
-- on the full form (long names) that claims answer; a claimed job is stored in that form.
local SHORT = {url = 'u', domain = 'd', lane = 'l', off = 'o', attempts = 'a',
  max_attempts = 'm', throttles = 't', token = 'k', created = 'c', eligible = 'e',
  payload = 'p', depth = 'dp', parent = 'pa', parent_url = 'pu', expires = 'x', fp = 'f',
  fpw = 'w', errors = 'er', dead_reason = 'dr', died = 'di', claimed = 'cl', releases = 'r',
  unused = 'un', request = 'q'}
local LONG = {}
for long, short in pairs(SHORT) do LONG[short] = long end
-- Fields left out when they hold these values (fixed: not the settings' defaults, which
-- clients may set apart; max_attempts is Settings' default).
local DEFAULTS = {off = 0, attempts = 0, throttles = 0, token = 0, depth = 0,
  lane = 'normal', releases = 0, unused = 0, max_attempts = 5}

-- The host[:port] of a URL: a job's domain unless its text says otherwise.
local function url_host(url)
  if type(url) ~= 'string' then return nil end
  local host = string.match(url, '^%a[%w+.%-]*://([^/?#]*)')
  if host then host = string.match(host, '([^@]*)$') end
  return host
end

-- The server time (ms) a job id was issued at, from its number (fresh_numbers: 1,000 a ms
-- from NUMBERS_EPOCH_MS); nil for an id of another form.
local function id_ms(id)
  if type(id) ~= 'string' or not string.find(id, '^%l%x+$') or #id > 14 then return nil end
  return math.floor(tonumber(string.sub(id, 2), 16) / 1000) + NUMBERS_EPOCH_MS
end

local function compact_text(job)
  local out = {}
  for k, v in pairs(job) do
    local short = SHORT[k]
    if short == nil then
      if k ~= 'id' then out[k] = v end
    elseif DEFAULTS[k] ~= v then
      out[short] = v
    end
  end
  if type(out.e) == 'number' and type(out.c) == 'number' then
    out.e = out.e - out.c
    if out.e == 0 then out.e = nil end
  end
  local issued = id_ms(job.id)
  if issued and type(out.c) == 'number' then
    out.c = out.c - issued
    if out.c == 0 then out.c = nil end
  end
  if out.d ~= nil and out.d == url_host(job.url) then out.d = nil end
  local text = cjson.encode(out)
  -- cjson writes '/' as '\/': JSON does not need it (every '\' it writes is escaped, so a
  -- '\' before '/' is always that escape)
  if string.find(text, '\\/', 1, true) then text = (string.gsub(text, '\\/', '/')) end
  return text
end

local function save_job(job)
  redis.call('SET', k_job(job.id), compact_text(job))
end

-- A decoded job text in the full form (compact or full as stored), or nil when not a table.
local function expand_job(decoded, id)
  if type(decoded) ~= 'table' then return nil end
  if decoded.u == nil then return decoded end  -- the full form (claimed jobs, older data)
  local job = {id = id}
  for k, v in pairs(decoded) do job[LONG[k] or k] = v end
  for k, v in pairs(DEFAULTS) do
    if job[k] == nil then job[k] = v end
  end
  local issued = id_ms(id)
  if issued then job.created = issued + (tonumber(decoded.c) or 0) end
  if decoded.e == nil then
    job.eligible = job.created
  elseif type(job.created) == 'number' and type(decoded.e) == 'number' then
    job.eligible = job.created + decoded.e
  end
  if job.domain == nil then job.domain = url_host(job.url) end
  return job
end

-- redis.call(cmd, [key,] args...) with the variadic `args` (a list) sent in slices of at most
-- 1000 (an even number, so score/member and key/value pairs stay whole): Lua's unpack has a
-- stack limit. Returns the table replies concatenated (MGET, HMGET).
local function call_many(cmd, key, args)
  local n = #args
  if n <= 1000 then
    if key then return redis.call(cmd, key, unpack(args)) end
    return redis.call(cmd, unpack(args))
  end
  local out = {}
  for i = 1, n, 1000 do
    local j = math.min(i + 999, n)
    local reply
    if key then
      reply = redis.call(cmd, key, unpack(args, i, j))
    else
      reply = redis.call(cmd, unpack(args, i, j))
    end
    if type(reply) == 'table' then
      for k = 1, j - i + 1 do out[#out + 1] = reply[k] end
    end
  end
  return out
end

-- Decode a stored job; nil when missing, false when corrupt. `raw`: its stored text when the
-- caller read it already (nil: read here).
local function load_job(id, raw)
  if raw == nil then raw = redis.call('GET', k_job(id)) end
  if not raw then return nil, nil end
  local ok, job = pcall(cjson.decode, raw)
  if ok then job = expand_job(job, id) end
  if not ok or type(job) ~= 'table' or job.id ~= id or type(job.url) ~= 'string'
      or type(job.domain) ~= 'string' or type(job.lane) ~= 'string'
      or type(job.attempts) ~= 'number' or type(job.max_attempts) ~= 'number'
      or type(job.off) ~= 'number' or type(job.eligible) ~= 'number' then
    return false, raw
  end
  return job, raw
end

local ERRORS_KEPT = 10

local function push_error(job, kind, message)
  local errors = job.errors
  if type(errors) ~= 'table' then errors = {} end
  message = tostring(message or '')
  if #message > 500 then message = string.sub(message, 1, 497) .. '...' end
  errors[#errors + 1] = {at = NOW, kind = kind, message = message}
  while #errors > ERRORS_KEPT do table.remove(errors, 1) end
  job.errors = errors
end
