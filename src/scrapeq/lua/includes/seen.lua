--[[
  The seen-set: URLs a queue has enqueued with unique = 'seen', so each is enqueued once for
  the queue's life, or once per recrawl period. Depends on common.lua (P, CFG, NOW, K_META).
  The client computes every hash (scrapeq/seen.py, SeenLayout.arg); this file only looks up
  and writes.

  seen_add(seen) -> true when the URL is new (it is recorded now), false when it was seen.
    seen  the `seen` table of a job spec, as the client built it:
            exact  {b = bucket, f = "fingerprint"}: f the URL's signed 64-bit fingerprint as
                   a decimal string (never a number: cjson keeps 14 significant digits), b
                   its low 16 bits (0..65535)
            bloom  {bits = {p_1, ..., p_k}}: the URL's k bit positions, each in [0, m)
    Check and add are one step: call it in the script that creates the job, create the job
    only on true, and a repeat in the same script (or any later call) answers false. A seen
    URL writes nothing. Raises the seen_layout_error text when the layout disagrees and the
    caller did not check first.

  seen_layout_error() -> nil, or the error text 'SQ_SEEN_LAYOUT <stored> <given>' when the
    queue's seen-set was built with another layout than CFG.seen_layout (the first call
    records it in the 'seen' field of sq:{Q}:meta): clients that disagree would not see
    each other's URLs. A script calls it before its first write when an item may call
    seen_add and answers redis.error_reply(text) (an error raised after writes would leave
    them in place). It reads Redis once per script call.

  Layout (CFG.seen_layout, CFG.seen_slice_ms, from the client's settings):
    exact          SADD f to sq:{Q}:seen:<b>, a set of integers: an intset of 8 bytes a member
                   while it holds at most set-max-intset-entries members (512 by default)
    exact, sliced  (recrawl_after = 4 slices of CFG.seen_slice_ms ms) looked up in the
                   current slice s = floor(NOW / seen_slice_ms) and the 4 before it, added to
                   sq:{Q}:seen:<s>:<b>, which expires when s leaves the window: a URL comes back
                   between recrawl_after and 1.25 x recrawl_after after it went in
    bloom          the k bits in sq:{Q}:seen:bloom: one BITFIELD GET, and one BITFIELD SET when
                   a bit was 0

  Cost: exact 1 SADD; sliced 4 SISMEMBER + SADD + PEXPIREAT; bloom 1 or 2 BITFIELD (k bits).
]]

local SEEN_LOOKBACK = 4
local SEEN_CHECKED = nil  -- nil: not yet; true: agrees; else the error text

local function seen_layout_error()
  if SEEN_CHECKED == nil then
    local stored = redis.call('HGET', K_META, 'seen')
    if not stored then
      redis.call('HSET', K_META, 'seen', CFG.seen_layout)
      SEEN_CHECKED = true
    elseif stored == CFG.seen_layout then
      SEEN_CHECKED = true
    else
      SEEN_CHECKED = 'SQ_SEEN_LAYOUT ' .. stored .. ' ' .. tostring(CFG.seen_layout)
    end
  end
  if SEEN_CHECKED == true then return nil end
  return SEEN_CHECKED
end

local function seen_exact(b, f)
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

local function seen_bloom(bits)
  local key = P .. 'seen:bloom'
  local args = {}
  for _, pos in ipairs(bits) do
    args[#args + 1] = 'GET'
    args[#args + 1] = 'u1'
    args[#args + 1] = string.format('%d', pos)
  end
  local new = false
  for _, bit in ipairs(redis.call('BITFIELD', key, unpack(args))) do
    if bit == 0 then
      new = true
      break
    end
  end
  if not new then return false end
  local set_args = {}
  for i = 1, #args, 3 do
    set_args[#set_args + 1] = 'SET'
    set_args[#set_args + 1] = 'u1'
    set_args[#set_args + 1] = args[i + 2]
    set_args[#set_args + 1] = 1
  end
  redis.call('BITFIELD', key, unpack(set_args))
  return true
end

local function seen_add(seen)
  local bad = seen_layout_error()
  if bad then error(bad, 0) end
  if seen.bits then return seen_bloom(seen.bits) end
  return seen_exact(string.format('%d', seen.b), seen.f)
end
