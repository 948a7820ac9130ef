--[[
  Wire names shared with the client, in the one table WIRE (settle-1.lua is near Lua's 200
  top-level locals): scrapeq/engine/lua/wire.py holds the same tables, and
  tests/engine/test_wire_names.py keeps them, and the fields settle-1.lua checks (check_item) and
  reads, equal. Stored names are not here: a job's compact form is codec.lua's SHORT, the
  adaptive state's fields adaptive_rule.lua's ADAPTIVE_FIELDS (both also in wire.py's docs).

  WIRE.SETTLE_ITEM: a settle item's fields (settle-1.lua's ARGV[3].items): the attribute of
    the client's Settlement -> the field on the wire.
  WIRE.DONE: what a `done` answer says beside its status, in this order:
    'done:<name>=<n>,...' (WIRE.done(notes); plain 'done' when there is nothing to say):
      changed          1 or 0: revisit = on, whether the page changed since its last visit
                       (includes/revisit.lua decides; a first visit is 1)
      not_modified     1: the fetch was a 304 to the revisit's conditional request
      max_pages        n: follow-ups of the page cut at their domain's max_pages
      max_bytes        n: follow-ups of the page cut at their domain's max_bytes
      revisit_skipped  1: the page's next visit was not scheduled, its domain past max_bytes
]]
local WIRE = {  --@once
  DONE = {'changed', 'not_modified', 'max_pages', 'max_bytes', 'revisit_skipped'},
}

WIRE.SETTLE_ITEM = {  --@once
  job_id = 'id', token = 'token', outcome = 'outcome', domain_failed = 'domain_failed',
  delay_ms = 'delay', backoff = 'backoff', retry_after_ms = 'retry_after', kind = 'kind',
  message = 'message', reason = 'reason', shutdown = 'shutdown', follow = 'follow',
  final = 'final_seen', latency_ms = 'latency', overload = 'overload', exit_result = 'exit',
  bytes_in = 'bytes', jar = 'jar', not_modified = 'not_modified', changed = 'changed',
  signature = 'signature', etag = 'etag', last_modified = 'last_modified', line = 'line',
  auto_evidence = 'auto'}

-- The answer of a settled done item from its notes ({name = n}, names of WIRE.DONE).
function WIRE.done(notes)
  local parts = {}
  for _, name in ipairs(WIRE.DONE) do
    if notes[name] ~= nil then parts[#parts + 1] = name .. '=' .. notes[name] end
  end
  if #parts == 0 then return 'done' end
  return 'done:' .. table.concat(parts, ',')
end
