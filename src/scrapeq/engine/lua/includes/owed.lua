--[[
  The owed-lines ledger (issue 25): a results line the worker writes from a settle's answer
  (a done page whose line says what the script decided, a retry, throttle or release the
  script made dead) is owed from the moment the settle ran until the worker wrote it. A worker
  killed in between would lose it; so the settle that makes it due stores it here, in the same
  call, and the worker acknowledges it once its sink took it (owed_ack-1.lua). A line nobody
  acknowledged within the grace (CFG.lease_ms) is taken over by any worker with a sink
  (owed_take-1.lua), which writes it: at least once, like every results line.

  Keys (per partition, includes/keys.lua; scrapeq/engine/model/keys.py names them too):
    K.OWED      hash: job id -> '<record JSON>\n<answer>': the attempt's record as the worker
                sent it (settle item `line`: JSON text on one line, at most OWED.MAX_LINE
                bytes, never decoded here) and the settle's answer for the item, from which
                the worker builds the line (runtime/records.py, _settled_line)
    K.OWED_DUE  zset: job id -> the ms from which another worker may take the line over

  OWED.MAX_LINE       the largest `line` (bytes), as scrapeq/engine/config/limits.py MAX_OWED_LINE
  OWED.check(line)    refuse a line too long or not on one line (a check of check_item)
  OWED.owe(id, answer, line)   note the line of a settled item when its answer makes one due
                      ('done...' or 'dead...'); nothing for retried, throttled, released, stale
  OWED.flush()        store what was noted: one HSET and one ZADD for the call (the caller's
                      last step, beside TALLY.flush, before an error is raised again)
]]
local OWED = {MAX_LINE = 4194304, fields = {}, due = {}}

function OWED.check(line)
  if #line > OWED.MAX_LINE then refuse('line', 'at most ' .. OWED.MAX_LINE .. ' bytes', #line) end
  if string.find(line, '\n', 1, true) then refuse('line', 'expected JSON text on one line', line) end
end

function OWED.owe(id, answer, line)
  local status = string.sub(answer, 1, 4)
  if status ~= 'done' and status ~= 'dead' then return end
  local n = #OWED.fields
  OWED.fields[n + 1] = id
  OWED.fields[n + 2] = line .. '\n' .. answer
  OWED.due[n + 1] = NOW + CFG.lease_ms
  OWED.due[n + 2] = id
end

function OWED.flush()
  if #OWED.fields == 0 then return end
  call_many('HSET', K.OWED, OWED.fields)
  call_many('ZADD', K.OWED_DUE, OWED.due)
  OWED.fields, OWED.due = {}, {}
end
