--[[
  Start a new crawl of the queue: forget what it has seen, one SCAN slice per call
  (`scrapeq crawl --new`, Scrapy's SCRAPEQ_NEW_CRAWL).

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {cursor, count}
      cursor   the SCAN cursor ('0' to start)
      count    SCAN's COUNT: about how many keys of the database one call looks at

  Of the keys matching `<prefix>*` that this SCAN step returns:
    <prefix>seen:*   the seen-set (exact buckets, recrawl time slices, Bloom chunks): UNLINKed
    <prefix>once:*   once-per-crawl flags (the Scrapy scheduler's start flag): UNLINKed
    <prefix>reg:<b>  a domain registry bucket: each domain's count of jobs enqueued (what
                     max_pages caps) set back to 0; the domains stay registered
  Nothing else is touched: pending, in-flight and dead jobs, domains' breakers and limits,
  the stats, the seen-set's layout in meta (so the new crawl keeps it). The prefix ends in
  '}:' (the queue's hash tag), so no other queue's key can match. The caller repeats until
  the cursor is '0' again. A worker of the same queue enqueueing meanwhile may add to the
  seen-set behind the cursor: stop the crawl's workers first.

  Output: {next cursor, seen-set keys deleted, flags deleted, domain counts reset}

  Errors: 'SQ_BAD_ARG <path>: ...' (includes/check.lua) for a bad cursor or count, before any
  write.

  Cost: one SCAN step and, per registry bucket found, one HGETALL and HSETs of its domains.
]]
--@include common

local refused = arg_refusal(function()
  if ARG.cursor ~= nil then check_match(ARG.cursor, 'cursor', '^%d+$', 'a SCAN cursor') end
  if ARG.count ~= nil then check_int(ARG.count, 'count', 1, MAX_INT) end
end)
if refused then return redis.error_reply(refused) end

local reply = redis.call('SCAN', ARG.cursor or '0', 'MATCH', P .. '*',
  'COUNT', tonumber(ARG.count) or 500)
local seen_prefix, once_prefix, reg_prefix = P .. 'seen:', P .. 'once:', P .. 'reg:'
local seen, flags, counts = 0, 0, 0
for _, key in ipairs(reply[2]) do
  if string.sub(key, 1, #seen_prefix) == seen_prefix then
    seen = seen + redis.call('UNLINK', key)
  elseif string.sub(key, 1, #once_prefix) == once_prefix then
    flags = flags + redis.call('UNLINK', key)
  elseif string.sub(key, 1, #reg_prefix) == reg_prefix
      and string.find(string.sub(key, #reg_prefix + 1), '^%d+$') then
    local fields = redis.call('HGETALL', key)
    local zeroed = {}
    for i = 1, #fields, 2 do
      if fields[i + 1] ~= '0' then
        zeroed[#zeroed + 1] = fields[i]
        zeroed[#zeroed + 1] = 0
      end
    end
    if #zeroed > 0 then
      call_many('HSET', key, zeroed)
      counts = counts + #zeroed / 2
    end
  end
end
return {reply[1], seen, flags, counts}
