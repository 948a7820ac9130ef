--[[
  The domain registry (the hashes sq:{Q}:reg:<b>, the set sq:{Q}:regb, the count sq:{Q}:dcount).
]]
--@include keys
-- The domain registry: every domain the queue knows, with its count of jobs enqueued since it
-- was first seen (its `enq`), spread over REGISTRY_BUCKETS small hashes sq:{Q}:reg:<b> so each
-- stays in Redis's compact encoding (up to 128 fields, and names of at most 64 bytes: about
-- 100,000 domains a partition) at ~25 bytes a domain. A domain that only has jobs queued has
-- no hash of its own (domain.lua): the registry is all it costs beyond its ready queue. The
-- set sq:{Q}:regb holds the numbers of the buckets that are not empty, so a queue of few
-- domains is listed without reading every bucket. scrapeq/engine/model/keys.py's registry_bucket is
-- the same function.
--
-- A queue written before the registry had buckets is migrated when a client opens it
-- (migrate-1.lua, migration 1): the scripts read this layout only.
local REGISTRY_BUCKETS = 1024  --@once
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

local function registry_has(d)
  return redis.call('HEXISTS', k_reg(d), d) == 1
end

-- Register d (its enq counter at 0) if it is new; once a call per domain.
local REG_KNOWN = {}
local function registry_add(d)
  if REG_KNOWN[d] then return end
  REG_KNOWN[d] = true
  if redis.call('HSETNX', k_reg(d), d, 0) == 1 then
    redis.call('INCR', K.DCOUNT)
    redis.call('SADD', K.REGB, registry_bucket(d))
  end
end

-- Domain d's count of jobs enqueued (0 when unknown). Read only.
local function registry_enq(d)
  return tonumber(redis.call('HGET', k_reg(d), d)) or 0
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
  if redis.call('DECR', K.DCOUNT) <= 0 then redis.call('DEL', K.DCOUNT) end
  if redis.call('EXISTS', key) == 0 then redis.call('SREM', K.REGB, registry_bucket(d)) end
end

-- The numbers of the registry's buckets that are not empty, as a lookup table.
local function registry_buckets()
  local out = {}
  for _, b in ipairs(redis.call('SMEMBERS', K.REGB)) do out[tonumber(b)] = true end
  return out
end
