--[[
  The log leader's lease: one worker of a queue logs the queue's events and progress.

  Every worker process asks about once a second; the holder renews its lease and stores the
  id of the last event it logged (the cursor), so a new leader starts after it. A cursor not
  renewed for cursor_ttl_ms (no leader that long) is forgotten: the next leader starts from
  the stream's newest event instead of replaying old ones as news.

  Input:
    KEYS[1]  queue key prefix
    ARGV[1]  clock offset ms, ARGV[2] config JSON
    ARGV[3]  JSON {id, ttl_ms, cursor_ttl_ms, cursor?, release?}
      id             the asking worker (host:pid:random)
      ttl_ms         the lease's length
      cursor_ttl_ms  how long a stored cursor is kept
      cursor         (the holder) the id of the last event it logged, stored in log-cursor
      release        true: the holder gives the lease up (stopping); its cursor is stored

  Keys: <prefix>log-leader (string: the holder's id, PX ttl_ms), <prefix>log-cursor (string:
  an event id, PX cursor_ttl_ms). Cost: O(1).

  Output: {state, start, behind}
    state   0: another worker leads (or this one released); 1: this one leads, lease renewed;
            2: this one leads from now on
    start   (state 2) the event id to read after: the stored cursor, else the stream's newest
            id ('0-0' when it is empty); '' otherwise
    behind  (state 0) 1 when the stored cursor is not the stream's newest id: events the
            leader has not logged yet (or not stored as logged); 0 otherwise
]]
--@include common

local refused = arg_refusal(function()
  check_str(ARG.id, 'id')
  check_ms(ARG.ttl_ms, 'ttl_ms', 1)
  check_ms(ARG.cursor_ttl_ms, 'cursor_ttl_ms', 1)
  if ARG.cursor ~= nil then check_str(ARG.cursor, 'cursor', true) end
  if ARG.release ~= nil then check_bool(ARG.release, 'release') end
end)
if refused then return redis.error_reply(refused) end

K.LEADER = P .. 'log-leader'
K.CURSOR = P .. 'log-cursor'

local function store_cursor()
  if type(ARG.cursor) == 'string' and ARG.cursor ~= '' then
    redis.call('SET', K.CURSOR, ARG.cursor, 'PX', ARG.cursor_ttl_ms)
  end
end

local function newest_event()
  local last = redis.call('XREVRANGE', K.EVENTS, '+', '-', 'COUNT', 1)
  if #last == 0 then return '0-0' end
  return last[1][1]
end

local holder = redis.call('GET', K.LEADER)
if ARG.release then
  if holder == ARG.id then
    store_cursor()
    redis.call('DEL', K.LEADER)
  end
  return {0, '', 0}
end
if holder and holder ~= ARG.id then
  local behind = 0
  if (redis.call('GET', K.CURSOR) or '0-0') ~= newest_event() then behind = 1 end
  return {0, '', behind}
end
redis.call('SET', K.LEADER, ARG.id, 'PX', ARG.ttl_ms)
if holder == ARG.id then
  store_cursor()
  return {1, '', 0}
end
return {2, redis.call('GET', K.CURSOR) or newest_event(), 0}
