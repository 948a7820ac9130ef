--[[
  Bring one key space of a queue to the schema this code writes, a slice a call (the client
  calls it when it opens a queue, until it answers no more work: scrapeq/engine/lua/schema.py,
  SchemaOpener, called by the partition router).

  KEYS[1] is one prefix of the queue: its home sq:{Q}: or a partition's sq:{Q:i}:.

  ARG:
    create  true: a key space with no key yet is stamped at the current schema (an enqueue
            is about to write it); false: it is left without a key (a read, an empty claim)
    budget  at most this many items moved by the call (1 to 10,000)

  The schema is the field `schema` of sq:{Q}:meta: how many of the MIGRATIONS below the data
  has had. Absent means 0: data written before schemas existed, or a queue first written
  by another call than an enqueue (domain_set, pause). Every migration leaves data that
  already has its layout as it is, so on such a queue they only stamp it. The scripts read
  and write the current layout only: a queue is migrated before they run.

  MIGRATIONS (the current schema is their count):
    1  the domain registry gets buckets. A queue written before keeps its domains in the set
       sq:{Q}:domains and each one's count of jobs enqueued in its hash (`enq`): `budget` of
       them a call move into sq:{Q}:reg:<b> (registry.lua), until the set is gone.

  Output: {schema, more}: the stored schema after the call (0: none; a key space without a
  key and not `create` stays so) and 1 when a migration is not finished (call again), else 0.

  Errors: 'SQ_SCHEMA <stored> <known>' when the stored schema is newer than this code knows
  (a newer scrapeq wrote the queue), 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad
  argument; each before any write.

  Cost: O(budget) a migration, and each migration is run to its end at most once.
]]
--@include common

local refused = arg_refusal(function()
  check_bool(ARG.create, 'create')
  check_int(ARG.budget, 'budget', 1, 10000)
end)
if refused then return redis.error_reply(refused) end

-- Each migration moves at most `budget` items and answers whether it is finished.
local MIGRATIONS = {}
local OLD_DOMAINS = P .. 'domains'  -- the registry before it had buckets (migration 1)

MIGRATIONS[1] = function(budget)
  for _, d in ipairs(redis.call('SPOP', OLD_DOMAINS, budget)) do
    registry_add(d)
    local dk = k_dom(d)
    local enq = tonumber(redis.call('HGET', dk, 'enq'))
    if enq then
      redis.call('HINCRBY', k_reg(d), d, enq)
      redis.call('HDEL', dk, 'enq')
    end
  end
  return redis.call('EXISTS', OLD_DOMAINS) == 0
end

local KNOWN = #MIGRATIONS
local raw = redis.call('HGET', K.META, 'schema')
local stored = tonumber(raw)
if raw and (not stored or stored % 1 ~= 0 or stored < 0) then
  return redis.error_reply('SQ_SCHEMA ' .. string.gsub(raw, '%s', '?') .. ' ' .. KNOWN)
end
if stored and stored > KNOWN then return redis.error_reply('SQ_SCHEMA ' .. raw .. ' ' .. KNOWN) end
if stored == KNOWN then return {KNOWN, 0} end

if not stored and redis.call('EXISTS', K.META, K.STATS, K.DCOUNT, OLD_DOMAINS) == 0 then
  if not ARG.create then return {0, 0} end  -- nothing stored: nothing to migrate
  redis.call('HSET', K.META, 'schema', KNOWN)
  return {KNOWN, 0}
end

local at = stored or 0
while at < KNOWN do
  if not MIGRATIONS[at + 1](ARG.budget) then
    if at > (stored or 0) then redis.call('HSET', K.META, 'schema', at) end
    return {at, 1}
  end
  at = at + 1
end
redis.call('HSET', K.META, 'schema', KNOWN)
return {KNOWN, 0}
