--[[
  Counters of a whole script call, written once per distinct (key, field) at its end: a
  settle of 64 items through one exit bumps the exit's `req` once by 64, not 64 times.
  Only for counters nothing in the same call reads back.

    TALLY.add(key, field, n)    HINCRBY by the integer n when flushed (n defaults to 1)
    TALLY.addf(key, field, x)   HINCRBYFLOAT by x (sums of floats: revisit figures)
    TALLY.flush()               write them all (the caller's last step, before an error is
                                raised again: the items settled before it are counted)
]]
local TALLY = {ints = {}, floats = {}}

function TALLY.put(into, key, field, n)
  local fields = into[key]
  if not fields then
    fields = {}
    into[key] = fields
  end
  fields[field] = (fields[field] or 0) + n
end

-- TALLY.put's body for TALLY.ints, written out: a settle adds four counts a job, and a call
-- saved is ~600 instructions
function TALLY.add(key, field, n)
  local fields = TALLY.ints[key]
  if not fields then
    fields = {}
    TALLY.ints[key] = fields
  end
  fields[field] = (fields[field] or 0) + (n or 1)
end

function TALLY.addf(key, field, x)
  TALLY.put(TALLY.floats, key, field, x)
end

function TALLY.flush()
  for key, fields in pairs(TALLY.ints) do
    for field, n in pairs(fields) do
      if n ~= 0 then redis.call('HINCRBY', key, field, n) end
    end
  end
  for key, fields in pairs(TALLY.floats) do
    for field, x in pairs(fields) do
      if x ~= 0 then redis.call('HINCRBYFLOAT', key, field, x) end
    end
  end
  TALLY.ints, TALLY.floats = {}, {}
end
