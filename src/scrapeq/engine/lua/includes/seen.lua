--[[
  The seen-set: URLs a queue has enqueued with unique = 'seen', so each is enqueued once for
  the queue's life, or once per recrawl period. Depends on common.lua (P, CFG, NOW, K.META).
  The client computes every hash (scrapeq/seen.py, SeenLayout.arg); this file only looks up
  and writes.

  seen_add(seen) -> true when the URL is new (it is recorded now), false when it was seen.
    seen  the `seen` table of a job spec, as the client built it:
            exact  {b = low, f = "fingerprint"}: f the URL's signed 64-bit fingerprint as
                   a decimal string (never a number: cjson keeps 14 significant digits), b
                   its low 32 bits (an integer in 0..2^32-1); its bucket is b mod the
                   queue's bucket count
            bloom  {bits = {p_1, ..., p_k}}: the URL's k bit positions, each in [0, m)
    Check and add are one step: call it in the script that creates the job, create the job
    only on true, and a repeat in the same script (or any later call) answers false. A seen
    URL writes nothing. Raises the seen_layout_error text when the layout disagrees and the
    caller did not check first.

  seen_has(seen) -> whether the seen-set has the URL, without recording it (false when the
    layout disagrees): what a follow-up cut by max_pages is counted as.

  seen_mark(seen) -> whether the URL was recorded now: seen_add for a URL fetched without
    being enqueued (a redirect's target), when the queue has a seen-set of this client's
    layout; a queue without one (or with another layout) is left as it is: the mark creates
    no seen-set and raises nothing.

  check_seen_arg(seen) raises the refusal of a malformed `seen` table (check.lua):
    enqueue.lua's check_spec calls it before the script's first write.

  seen_layout_error() -> nil, or the error text 'SQ_SEEN_LAYOUT <stored> <given>' when the
    queue's seen-set was built with another layout than CFG.seen_layout (the first call
    records it in the 'seen' field of sq:{Q}:meta, and creates a Bloom filter whole):
    clients that disagree would not see each other's URLs. The exact seen-set's bucket
    count is not part of the agreement: the first call records CFG.seen_buckets (the
    stamp gains '/buckets=<n>' unless n = 65,536, the count of every queue written before
    it was recorded), and every later call uses the recorded count whatever its own (a
    stamp whose count is not in 1..2^32 is another layout: SQ_SEEN_LAYOUT). A script calls
    it before its first write when an item may call seen_add and answers
    redis.error_reply(text) (an error raised after writes would leave them in place). It
    reads Redis once per call.

  Layout (CFG.seen_layout, seen_slice_ms, seen_buckets, seen_bits, seen_chunk_bits: the
  client's settings):
    exact          SADD f to sq:{Q}:seen:<b mod buckets>, a set of integers: an intset of 8
                   bytes a member while it holds at most set-max-intset-entries members (512
                   by default)
    exact, sliced  (recrawl_after = 4 slices of CFG.seen_slice_ms ms) looked up in the
                   current slice s = floor(NOW / seen_slice_ms) and the 4 before it, added to
                   sq:{Q}:seen:<s>:<b>, which expires when s leaves the window: a URL comes back
                   between recrawl_after and 1.25 x recrawl_after after it went in
    bloom          the k bits of a bitmap of CFG.seen_bits bits kept in strings of
                   seen_chunk_bits bits, sq:{Q}:seen:bloom:<c> holding bits c * chunk to
                   (c + 1) * chunk - 1: GETBIT until one is 0 (all 1: seen), then SETBIT of
                   the k. The call that records the layout creates every chunk (SET of
                   seen_chunk_bits / 8 zero bytes each), so each takes exactly its size (a
                   bitmap grown by SETBIT keeps up to 1 MiB more); a chunk deleted since is
                   grown again by SETBIT

  Cost: exact 1 SADD; sliced 4 SISMEMBER + SADD + PEXPIREAT; bloom 1 to k GETBIT, and k
  SETBIT for a new URL. seen_has: 1 SISMEMBER, 5 sliced, 1 to k GETBIT. The call that
  records a Bloom layout writes the whole filter once (seen_bits / 8 bytes, at most 512 MiB).
]]

local SEEN_LOOKBACK = 4  --@once

-- Check the `seen` table of a job spec (raises its refusal: check.lua): exact, a bucket and
-- a decimal fingerprint; bloom, positions within CFG.seen_bits.
local function check_seen_arg(seen)
  check_table(seen)
  if seen.bits ~= nil then
    check_list(seen.bits, 'bits', function(pos) check_int(pos, nil, 0, CFG.seen_bits - 1) end)
    return
  end
  check_int(seen.b, 'b', 0, 4294967295)  -- the fingerprint's low 32 bits: its bucket
  check_match(seen.f, 'f', '^%-?%d+$', 'a decimal fingerprint')
end

local SEEN_CHECKED = nil  -- nil: not yet; true: agrees; else the error text
local SEEN_DEFAULT_BUCKETS = 65536  -- a stamp naming no count  --@once
local SEEN_MAX = 4294967296  -- 2^32: b is below it, the bucket count at most it  --@once
local SEEN_BUCKETS = SEEN_DEFAULT_BUCKETS  -- the queue's, once seen_layout_error agreed

local function seen_whole(v, low, high)
  return type(v) == 'number' and v == math.floor(v) and v >= low and v <= high
end

-- The first call: the layout, with the bucket count unless the default (exact), is recorded.
local function seen_record()
  local bloom = (tonumber(CFG.seen_chunk_bits) or 0) > 0
  local stamp = CFG.seen_layout
  if not bloom then
    local buckets = CFG.seen_buckets or SEEN_DEFAULT_BUCKETS  -- checked by check_config
    if buckets ~= SEEN_DEFAULT_BUCKETS then
      stamp = stamp .. '/buckets=' .. string.format('%d', buckets)
    end
    SEEN_BUCKETS = buckets
  end
  redis.call('HSET', K.META, 'seen', stamp)
  if bloom then
    local zeros = string.rep('\0', CFG.seen_chunk_bits / 8)
    for c = 0, CFG.seen_bits / CFG.seen_chunk_bits - 1 do
      redis.call('SET', P .. 'seen:bloom:' .. string.format('%d', c), zeros)
    end
  end
  return true
end

local function seen_agree(stored)
  local layout, buckets = string.match(stored, '^(.*)/buckets=(%d+)$')
  if not layout then layout, buckets = stored, SEEN_DEFAULT_BUCKETS end
  buckets = tonumber(buckets)
  if layout ~= CFG.seen_layout or not seen_whole(buckets, 1, SEEN_MAX) then
    local shown = layout == CFG.seen_layout and stored or layout  -- a damaged count: the stamp
    return 'SQ_SEEN_LAYOUT ' .. shown .. ' ' .. tostring(CFG.seen_layout)
  end
  SEEN_BUCKETS = buckets
  return true
end

local function seen_layout_error()
  if SEEN_CHECKED == nil then
    local stored = redis.call('HGET', K.META, 'seen')
    if stored then SEEN_CHECKED = seen_agree(stored) else SEEN_CHECKED = seen_record() end
  end
  if SEEN_CHECKED == true then return nil end
  return SEEN_CHECKED
end

local function seen_exact(low, f)
  local b = string.format('%d', low % SEEN_BUCKETS)
  local slice_ms = tonumber(CFG.seen_slice_ms) or 0
  if slice_ms <= 0 then
    return redis.call('SADD', P .. 'seen:' .. b, f) == 1
  end
  local now_slice = math.floor(NOW / slice_ms)
  for s = now_slice - SEEN_LOOKBACK, now_slice - 1 do
    if redis.call('SISMEMBER', P .. 'seen:' .. string.format('%d', s) .. ':' .. b, f) == 1 then
      return false
    end
  end
  local key = P .. 'seen:' .. string.format('%d', now_slice) .. ':' .. b
  if redis.call('SADD', key, f) == 0 then return false end
  redis.call('PEXPIREAT', key, string.format('%.0f', (now_slice + SEEN_LOOKBACK + 1) * slice_ms))
  return true
end

-- The chunk keys and offsets of a URL's Bloom bit positions.
local function bloom_places(bits)
  local chunk = CFG.seen_chunk_bits
  local keys, offsets = {}, {}
  for i, pos in ipairs(bits) do
    local c = math.floor(pos / chunk)
    keys[i] = P .. 'seen:bloom:' .. string.format('%d', c)
    offsets[i] = pos - c * chunk
  end
  return keys, offsets
end

local function bloom_has(keys, offsets)
  for i = 1, #keys do
    if redis.call('GETBIT', keys[i], offsets[i]) == 0 then return false end
  end
  return true
end

local function seen_bloom(bits)
  local keys, offsets = bloom_places(bits)
  if bloom_has(keys, offsets) then return false end
  for i = 1, #keys do redis.call('SETBIT', keys[i], offsets[i], 1) end
  return true
end

local function seen_add(seen)
  local bad = seen_layout_error()
  if bad then error(bad, 0) end
  if seen.bits then return seen_bloom(seen.bits) end
  return seen_exact(seen.b, seen.f)
end

local function seen_has(seen)
  if seen_layout_error() then return false end
  if seen.bits then return bloom_has(bloom_places(seen.bits)) end
  local b, f = string.format('%d', seen.b % SEEN_BUCKETS), seen.f
  local slice_ms = tonumber(CFG.seen_slice_ms) or 0
  if slice_ms <= 0 then return redis.call('SISMEMBER', P .. 'seen:' .. b, f) == 1 end
  local now_slice = math.floor(NOW / slice_ms)
  for sl = now_slice - SEEN_LOOKBACK, now_slice do
    if redis.call('SISMEMBER', P .. 'seen:' .. string.format('%d', sl) .. ':' .. b, f) == 1 then
      return true
    end
  end
  return false
end

local function seen_mark(seen)
  if SEEN_CHECKED == nil then
    local stored = redis.call('HGET', K.META, 'seen')
    if not stored then return false end  -- no seen-set (yet): not cached, a later call may make it
    SEEN_CHECKED = seen_agree(stored)  -- the layout, and the queue's bucket count
  end
  if SEEN_CHECKED ~= true then return false end
  return seen_add(seen)
end
