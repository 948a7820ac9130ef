--[[
  Per-minute history of outcomes and breaker events, for charts (Queue.history).
  Depends on common.lua. Included by jobs.lua and breaker.lua (once per script, wherever it
  is first named).

  Keys: sq:{Q}:history:<hour> (hour = floor(now / 3600000)), a hash per hour whose fields are
  '<minute of the hour>:<outcome>:<lane>' (done, retried, dead, throttled, released: not the
  releases of a worker stopping, which say nothing about the jobs) or
  '<minute of the hour>:<event>' (trip, retired, pause), each counting what happened in that
  minute. Every write sets the hash's TTL to HISTORY_KEEP_MS, so an hour is kept 25 h after
  its last write and at most 26 hashes live: the memory is bounded by minutes x lanes x
  outcomes, whatever the traffic (60 x 5 x lanes + events fields an hour).

  Cost: one HINCRBY per dead or retried job (history), one per distinct field of a settle
  call for the other outcomes (history_via), and one HINCRBY 0 + PEXPIRE per call and hour.
]]
local HISTORY_KEEP_MS = 25 * 3600000  --@once
-- The call's hour key and its fields, built once per call (NOW is the call's): key, the
-- minute's prefix, and fields[name][lane or 1]. Nil until the call's first count, which
-- creates the key and sets its TTL.
local HISTORY_AT = nil

local function history_field(name, lane)
  local at = HISTORY_AT
  if not at then
    local minute = math.floor(NOW / 60000)
    at = {key = P .. 'history:' .. math.floor(minute / 60), prefix = (minute % 60) .. ':',
      fields = {}}
  end
  local by_lane = at.fields[name]
  if not by_lane then
    by_lane = {}
    at.fields[name] = by_lane
  end
  local field = by_lane[lane or 1]
  if not field then
    field = at.prefix .. name
    if lane then field = field .. ':' .. lane end
    by_lane[lane or 1] = field
  end
  if not HISTORY_AT then
    -- the key must exist for its TTL to hold: a write of 0 creates it (history_via's write
    -- comes at the end of the call)
    redis.call('HINCRBY', at.key, field, 0)
    redis.call('PEXPIRE', at.key, HISTORY_KEEP_MS)
    HISTORY_AT = at
  end
  return at.key, field
end

-- Count one `name` (an outcome with its lane, or an event without) in the current minute.
-- 'stale' settles change nothing and are not counted.
local function history(name, lane)
  if name == 'stale' then return end
  local key, field = history_field(name, lane)
  redis.call('HINCRBY', key, field, 1)
end

-- The same, n of them (nil: 1), through a caller's batching `bump(key, field, n)`
-- (settle-1.lua's TALLY.add, written once per distinct field at the end of the call): a
-- batch's common outcomes cost one HINCRBY.
local function history_via(bump, name, lane, n)
  if name == 'stale' then return end
  local key, field = history_field(name, lane)
  bump(key, field, n)
end

-- settle-1.lua's count of n settled items (nil: 1) of a status and lane: done, throttled and
-- released through its batched `bump`; retried and dead are counted where they happen
-- (jobs.lua), and the release of a worker stopping (`shutdown`) is no outcome of the job.
local function history_settled(bump, status, lane, sd, n)
  if sd == true or status == 'dead' or status == 'retried' then return end
  history_via(bump, status, lane, n)
end
