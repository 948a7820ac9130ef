--[[
  The job codec: a job's stored (compact) text to and from its full form, loading and saving a
  job (sq:{Q}:job:<id>), and the error history kept in a job. scrapeq/engine/model/job.py reads the
  same stored form on the Python side.
]]
--@include keys
--@include ids
-- A job is stored compact (see jobs.lua's header): short field names, defaults left out, no
-- id (the key names it), no domain when it is the URL's host, created as ms after the time
-- its id was issued (id_ms; left out when 0), eligible as ms after created (left out when
-- 0), '/' not escaped. Scripts work
-- on the full form (long names) that claims answer; a claimed job is stored in that form.
-- 'sg' (signature) is no longer written: revisits scheduled by an earlier version carry it,
-- and readers ignore it (a stored name is never given to another field).
local SHORT = {url = 'u', domain = 'd', lane = 'l', off = 'o', attempts = 'a',  --@once
  max_attempts = 'm', throttles = 't', token = 'k', created = 'c', eligible = 'e',
  payload = 'p', depth = 'dp', parent = 'pa', parent_url = 'pu', expires = 'x', fp = 'f',
  fpw = 'w', errors = 'er', dead_reason = 'dr', died = 'di', claimed = 'cl', releases = 'r',
  unused = 'un', request = 'q', exit = 'xi', weight = 'wt', etag = 've',
  last_modified = 'vm', rv_due = 'rd', signature = 'sg', jar = 'sj', fetcher = 'fe',
  domain_fetcher = 'dfe', domain_wait_for = 'dwf', auto_fetcher = 'afe', auto_level = 'alv',
  line_waits = 'lw'}
-- Counters a claimed job's text leaves out when 0 (claim-1.lua: lease), as a compact text
-- does: every reader of the full form takes them as 0 (expand_job; job.py: ZERO_COUNTERS).
local ZERO_COUNTERS = {'off', 'throttles', 'releases', 'depth', 'unused'}  --@once
local LONG = {}  --@once
-- filled at a script's first call: a library (engine/lua/library.py) calls no pairs at load
if not LONG.u then
  for long, short in pairs(SHORT) do LONG[short] = long end
end
-- Fields left out when they hold these values (fixed: not the settings' defaults, which
-- clients may set apart; max_attempts is Settings' default).
local DEFAULTS = {off = 0, attempts = 0, throttles = 0, token = 0, depth = 0,  --@once
  lane = 'normal', releases = 0, unused = 0, max_attempts = 5}

-- The host[:port] of a URL: a job's domain unless its text says otherwise.
local function url_host(url)
  if type(url) ~= 'string' then return nil end
  local host = string.match(url, '^%a[%w+.%-]*://([^/?#]*)')
  -- the part after the last '@' (userinfo dropped); a plain find first: most hosts have none
  if host and string.find(host, '@', 1, true) then host = string.match(host, '([^@]*)$') end
  return host
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

-- A claimed job stored again after a mark on its lease (heartbeat-1.lua's `hr`,
-- downloaded-1.lua's `sf`), in the full form its claim wrote.
local function save_claimed(job)
  redis.call('SET', k_job(job.id), cjson.encode(job))
end

-- A decoded job text in the full form (compact or full as stored), or nil when not a table.
-- `host`: the domain a job stored without one is known to have (the domain queue it was read
-- from: its URL's host, by the stored form's rule); nil: taken from its URL here.
local function expand_job(decoded, id, host)
  if type(decoded) ~= 'table' then return nil end
  if decoded.u == nil then  -- the full form (claimed jobs, older data)
    for i = 1, #ZERO_COUNTERS do
      if decoded[ZERO_COUNTERS[i]] == nil then decoded[ZERO_COUNTERS[i]] = 0 end
    end
    return decoded
  end
  -- its hash part sized once for the fields a job has by its claim (a constructor's named
  -- fields size it; a nil one is no field): grown one at a time it is rebuilt five times
  local job = {id = id, url = nil, domain = nil, lane = nil, off = nil, attempts = nil,
    max_attempts = nil, throttles = nil, token = nil, created = nil, eligible = nil,
    depth = nil, releases = nil, unused = nil, claimed = nil, lm = nil, payload = nil,
    fp = nil}
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
  if job.domain == nil then job.domain = host or url_host(job.url) end
  return job
end

-- Decode a stored job; nil when missing, false when corrupt. `raw`: its stored text when the
-- caller read it already (nil: read here); `host`: expand_job's.
local load_job
do
  -- Whether a decoded job's fields every script reads have their types, without a call of
  -- type() a field (each ~600 instructions, a claim and a settle read every job): v .. '' is
  -- v itself only for a string (a number becomes another value, any other type raises);
  -- v + 0 == v only for a number (v ~= v: NaN; a numeric string becomes a number, any other
  -- type raises). Run under pcall: a raise is false, as type() said.
  local function typed(job)
    local url, domain, lane = job.url, job.domain, job.lane
    local a, m, off, e = job.attempts, job.max_attempts, job.off, job.eligible
    return url == url .. '' and domain == domain .. '' and lane == lane .. ''
      and (a + 0 == a or a ~= a) and (m + 0 == m or m ~= m)
      and (off + 0 == off or off ~= off) and (e + 0 == e or e ~= e)
  end

  load_job = function(id, raw, host)
    if raw == nil then raw = redis.call('GET', k_job(id)) end
    if not raw then return nil, nil end
    local ok, job = pcall(cjson.decode, raw)
    if ok then job = expand_job(job, id, host) end
    if not ok or type(job) ~= 'table' or job.id ~= id then return false, raw end
    local fine, typed_ok = pcall(typed, job)
    if not (fine and typed_ok) then return false, raw end
    return job, raw
  end
end

local ERRORS_KEPT = 10  --@once

local function push_error(job, kind, message)
  local errors = job.errors
  if type(errors) ~= 'table' then errors = {} end
  message = tostring(message or '')
  if #message > 500 then message = string.sub(message, 1, 497) .. '...' end
  errors[#errors + 1] = {at = NOW, kind = kind, message = message}
  while #errors > ERRORS_KEPT do table.remove(errors, 1) end
  job.errors = errors
end
