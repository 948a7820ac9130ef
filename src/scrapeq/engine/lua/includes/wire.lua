--[[
  Wire names of a settle item (settle-1.lua's ARGV[3].items): the attribute of the client's
  Settlement -> the field on the wire. scrapeq/engine/wire.py (SETTLE_ITEM) is the same
  table; tests/test_wire_names.py keeps the two, and the fields settle-1.lua checks
  (check_item) and reads, equal. Stored names are not here: a job's compact form is codec.lua's
  SHORT, the adaptive state's fields adaptive_rule.lua's ADAPTIVE_FIELDS (both also in
  wire.py's docs).
]]
local SETTLE_ITEM = {
  job_id = 'id', token = 'token', outcome = 'outcome', domain_failed = 'domain_failed',
  delay_ms = 'delay', backoff = 'backoff', retry_after_ms = 'retry_after', kind = 'kind',
  message = 'message', reason = 'reason', shutdown = 'shutdown', follow = 'follow',
  final = 'final_seen', latency_ms = 'latency', overload = 'overload', exit_result = 'exit',
  bytes_in = 'bytes', jar = 'jar', not_modified = 'not_modified', changed = 'changed',
  signature = 'signature', etag = 'etag', last_modified = 'last_modified'}
