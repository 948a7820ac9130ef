--[[
  The key names of a queue: every key starts with the prefix P (KEYS[1], "sq:{<queue>}:"),
  so a queue's keys share one Redis Cluster hash slot. scrapeq/engine/model/keys.py names the same
  keys on the Python side.
]]
--@include prologue
-- The queue's fixed keys, one table (one local: settle-1.lua's expansion stays far under Lua
-- 5.1's 200 locals of a function); a script adds its own (log_leader-1.lua: K.LEADER). A
-- function library (Redis 7: engine/lua/library.py) keeps each prefix's table from call to
-- call in KEYS_OF (at most 64 prefixes); a script run by EVAL builds it every call.
local KEYS_OF = {n = 0}  --@once
local K = KEYS_OF[P]
if not K then
  K = {}
  K.DELAYED = P .. 'delayed'
  K.READY = P .. 'domains:ready'
  K.WAIT = P .. 'domains:wait'
  K.DCOUNT = P .. 'dcount'  -- the number of domains in the registry
  K.REGB = P .. 'regb'  -- the registry's buckets that are not empty
  K.INFLIGHT = P .. 'inflight'
  K.LEASED = P .. 'leased'  -- hash: id of a claimed job -> its domain
  K.DEAD = P .. 'dead'
  K.STATS = P .. 'stats'
  K.UNIQUE = P .. 'unique'
  K.HOSTS = P .. 'hosts'  -- politeness = ip: host -> group key (host_group-1.lua)
  K.EVENTS = P .. 'events'
  K.META = P .. 'meta'
  K.LANES = P .. 'lanes'
  K.LANE_SINCE = P .. 'lane-since'  -- lane -> ms (jobs.lua: lane_ready)
  K.TRIPS = P .. 'trips'
  K.ACTIVE = P .. 'active'
  K.RETIRING = P .. 'retiring'
  K.RETIRED = P .. 'retired'
  K.IDLE = P .. 'idle'  -- zset: domain -> when it was last seen idle (domain.lua)
  K.OPEN = P .. 'open'  -- set: domains whose breaker is open or half-open (breaker.lua)
  K.WAKE = P .. 'wake'  -- stream (one entry): urgent work was enqueued (enqueue.lua)
  K.EXITS_DOWN = P .. 'exits:down'  -- hash: exit id -> cooldown end, exits not closed (exits.lua)
  K.BROWSERS_DOWN = P .. 'browsers:down'  -- hash: worker -> its benched browsers (browser_down-1)
  K.OWED = P .. 'owed'  -- hash: job id -> a results line owed to a sink (owed.lua)
  K.OWED_DUE = P .. 'owed:due'  -- zset: job id -> when another worker may write it (owed.lua)
  if KEYS_OF.n >= 64 then KEYS_OF = {n = 0} end
  KEYS_OF[P], KEYS_OF.n = K, KEYS_OF.n + 1
end

local function k_job(id) return P .. 'job:' .. id end
local function k_dq(d) return P .. 'dq:' .. d end
local function k_dom(d) return P .. 'domain:' .. d end
local function k_ddead(d) return P .. 'ddead:' .. d end
local function k_lane(l) return P .. 'lane:' .. l end
local function k_exit(id) return P .. 'exit:' .. id end
local function k_dexit(d) return P .. 'dexit:' .. d end
