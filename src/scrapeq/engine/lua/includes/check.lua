--[[
  Input checks: every script checks all of its inputs before its first write.

  Redis never rolls a script back: a command that fails half-way (SET ... PX or PEXPIRE given
  a time past what Redis takes, ZADD given a NaN score, HINCRBY or LIMIT given 1e+20, an
  argument of the wrong type) leaves every write before it in place. So the clock offset
  (ARGV[1]) and the configuration (ARGV[2]) are checked for every script by common.lua
  (decode_inputs), and each script checks its own arguments (ARGV[3]) right after its
  includes, before it reads or writes anything else:

    local refused = arg_refusal(function()
      check_int(ARG.n, 'n', 1, MAX_INT)
    end)
    if refused then return redis.error_reply(refused) end

  A check raises its refusal; arg_refusal answers it as 'SQ_BAD_ARG <path>: <why>, got <value>'
  (nil when every check passed), a refused configuration is 'SQ_BAD_CONFIG <field>: ...'.
  scrapeq/engine/lua/scripts.py (map_error) maps them to ScriptError and ConfigError. <path>
  names the value as in the JSON the client sent, lists 0-based: 'items[0].delay'.

  `name` is the value's field in the object being checked (nil: the value itself, an item of
  a list); check_list and check_in keep the path to that object, so a valid call builds no
  path text. An absent value (nil) is refused: a script tests `v ~= nil` itself for an
  optional one; JSON null is cjson.null, neither a number nor a string. The checks:
    check_int(v, name, lo, hi)          an integer in [lo, hi]
    check_num(v, name, lo, hi)          a finite number in [lo, hi] (hi math.huge: any)
    check_ms(v, name, lo)               a duration in ms: an integer in [lo (0), MAX_MS]
    check_str(v, name, empty)           a string, not empty unless `empty`
    check_match(v, name, pattern, what) a string matching the Lua pattern (`what` says it)
    check_enum(v, name, words)          one of `words`, a list of strings
    check_bool(v, name)                 true or false
    check_table(v, name)                a table (a JSON object or list)
    check_list(v, name, each)           a table whose items 1..#v each pass each(item)
    check_in(v, name, each)             each(v), with `name` on the path
  Bounds, the same as scrapeq/engine/config/limits.py and lanes.py (a test keeps them equal):
    MAX_MS         100 years in ms: a time (now + a duration) stays an exact integer of ms
    MAX_INT        the largest integer Lua writes back exactly (cjson: 14 digits)
    MAX_OFFSET_MS  the largest lane offset (lanes.MAX_OFFSET, 10^12 s)
]]

local MAX_MS = 3155760000000  --@once
local MAX_INT = 99999999999999  --@once
local MAX_OFFSET_MS = 1000000000000000  --@once

local CHECKING = {code = 'SQ_BAD_ARG'}  -- the code of the refusals being checked
-- Where the object being checked is: field names and 0-based list indexes, outermost first.
local CHECK_PATH = {}

local function check_path(name)
  local out = {}
  for _, piece in ipairs(CHECK_PATH) do
    if type(piece) == 'number' then
      out[#out + 1] = '[' .. piece .. ']'
    else
      out[#out + 1] = (#out > 0 and '.' or '') .. piece
    end
  end
  if name then out[#out + 1] = (#out > 0 and '.' or '') .. name end
  return table.concat(out)
end

-- A value as a refusal shows it: one line, at most ~40 characters.
local function check_shown(v)
  if type(v) == 'number' then return string.format('%.14g', v) end
  if type(v) == 'string' then
    if #v > 40 then v = string.sub(v, 1, 37) .. '...' end
    return '"' .. string.gsub(v, '[%c"\\]', '?') .. '"'
  end
  if v == nil then return 'nothing' end
  if v == cjson.null then return 'null' end
  if type(v) == 'table' then return 'a table' end
  return tostring(v)
end

local function refuse(name, why, v)
  error(CHECKING.code .. ' ' .. check_path(name) .. ': ' .. why .. ', got ' .. check_shown(v), 0)
end

local function check_num(v, name, lo, hi)
  if type(v) ~= 'number' or v ~= v or v == math.huge or v == -math.huge or v < lo or v > hi then
    if hi == math.huge then refuse(name, 'expected a finite number >= ' .. check_shown(lo), v) end
    refuse(name, 'expected a number in [' .. check_shown(lo) .. ', ' .. check_shown(hi) .. ']',
      v)
  end
end

-- (v % 1 is NaN for NaN and the infinities: v % 1 == 0 says a finite integer)
local function check_int(v, name, lo, hi)
  if type(v) ~= 'number' or v % 1 ~= 0 or v < lo or v > hi then
    refuse(name, 'expected an integer in [' .. check_shown(lo) .. ', ' .. check_shown(hi) .. ']',
      v)
  end
end

local function check_ms(v, name, lo)
  if type(v) ~= 'number' or v % 1 ~= 0 or v < (lo or 0) or v > MAX_MS then
    refuse(name, 'expected ms in [' .. (lo or 0) .. ', ' .. MAX_MS .. '] (at most 100 years)', v)
  end
end

local function check_str(v, name, empty)
  if type(v) ~= 'string' or (#v == 0 and not empty) then
    refuse(name, empty and 'expected a string' or 'expected a non-empty string', v)
  end
end

local function check_match(v, name, pattern, what)
  if type(v) ~= 'string' or not string.find(v, pattern) then refuse(name, 'expected ' .. what, v) end
end

local function check_enum(v, name, words)
  for i = 1, #words do  -- not ipairs: no call a word (a settle checks an outcome a job)
    if v == words[i] then return end
  end
  refuse(name, 'expected one of ' .. table.concat(words, ', '), v)
end

-- The fetchers a job or a domain may name (engine/config/specs.py: FETCHERS).
local FETCHERS = {'http', 'impersonate', 'browser', 'auto'}  --@once

local function check_bool(v, name)
  if type(v) ~= 'boolean' then refuse(name, 'expected true or false', v) end
end

local function check_table(v, name)
  if type(v) ~= 'table' then refuse(name, 'expected a JSON object or list', v) end
end

local function check_in(v, name, each)
  CHECK_PATH[#CHECK_PATH + 1] = name
  each(v)
  CHECK_PATH[#CHECK_PATH] = nil
end

local function check_list(v, name, each)
  if type(v) ~= 'table' then refuse(name, 'expected a list', v) end
  if name then CHECK_PATH[#CHECK_PATH + 1] = name end
  local at = #CHECK_PATH + 1
  for i = 1, #v do
    CHECK_PATH[at] = i - 1
    each(v[i])
  end
  CHECK_PATH[at] = nil
  if name then CHECK_PATH[at - 1] = nil end
end

-- Run `checks` (a function calling the checks above); the refusal text of code `code`, or
-- nil when every check passed. A check that failed on a value of an unexpected shape (a Lua
-- error) is a refusal too: it came before any write.
local function input_refusal(code, checks)
  CHECKING.code = code
  for i = #CHECK_PATH, 1, -1 do CHECK_PATH[i] = nil end
  local ok, err = pcall(checks)
  if ok then return nil end
  err = tostring(err)
  if string.sub(err, 1, #code + 1) ~= code .. ' ' then err = code .. ' ' .. err end
  return (string.gsub(err, '%c', ' '))
end

-- A script's own arguments (ARGV[3], decoded as ARG): see the header.
local function arg_refusal(checks)
  return input_refusal('SQ_BAD_ARG', checks)
end

-- check_config in a block: its helper check_pools costs no script a top-level local
-- (tests/engine/test_lua_locals.py).
local check_config
do
  -- The exit pool, revisits and the per-domain byte budget: the end of check_config.
  local function check_pools(c)
    local int, ms = check_int, check_ms
    -- the exit pool (scrapeq/engine/model/exits.py: at most 200 exits in 16 tiers)
    if #c.exits > 200 then refuse('exits', 'at most 200 exits', #c.exits) end
    check_list(c.exits, 'exits', function(e)
      check_table(e)
      check_match(e[1], 'id', '^[%w]+$', 'an exit id')
      check_int(e[2], 'tier', 0, 15)
    end)
    ms(c.ex_ban_ms, 'ex_ban_ms')
    ms(c.ex_ban_max_ms, 'ex_ban_max_ms')
    ms(c.ex_cool_ms, 'ex_cool_ms')
    ms(c.ex_cool_max_ms, 'ex_cool_max_ms')
    ms(c.ex_quiet_ms, 'ex_quiet_ms')
    check_bool(c.sticky, 'sticky')
    -- revisits (includes/revisit.lua) and the per-domain byte budget
    check_bool(c.rv, 'rv')
    check_num(c.rv_budget, 'rv_budget', 0, 1e9)
    ms(c.rv_min_ms, 'rv_min_ms', 1000)
    ms(c.rv_max_ms, 'rv_max_ms', c.rv_min_ms)
    if c.max_bytes ~= cjson.null then int(c.max_bytes, 'max_bytes', 1, MAX_INT) end
  end

  -- The configuration every script gets (ARGV[2]: scrapeq/engine/lua/scripts.py, ScriptConfig),
  -- in script units. A script reads only some of it; all of it is checked, once, here.
  function check_config(c)
    local int, ms = check_int, check_ms
    int(c.conc, 'conc', 1, MAX_INT)
    ms(c.delay_ms, 'delay_ms')
    ms(c.lease_ms, 'lease_ms')
    int(c.batch, 'batch', 1, MAX_INT)
    int(c.fails, 'fails', 1, MAX_INT)
    int(c.window, 'window', 1, MAX_INT)
    check_num(c.rate, 'rate', 0, 1)
    int(c.min_calls, 'min_calls', 1, MAX_INT)
    ms(c.cool_ms, 'cool_ms')
    ms(c.cool_max_ms, 'cool_max_ms')
    int(c.max_trips, 'max_trips', 1, MAX_INT)
    check_num(c.g_share, 'g_share', 0, 1)
    int(c.g_min, 'g_min', 1, MAX_INT)
    ms(c.g_window_ms, 'g_window_ms')
    int(c.max_throttles, 'max_throttles', 0, MAX_INT)
    int(c.max_releases, 'max_releases', 0, MAX_INT)
    ms(c.backoff_base_ms, 'backoff_base_ms')
    ms(c.backoff_cap_ms, 'backoff_cap_ms')
    int(c.claim_bytes, 'claim_bytes', 1, MAX_INT)
    ms(c.keep_done_ms, 'keep_done_ms')
    if c.max_pages ~= cjson.null then int(c.max_pages, 'max_pages', 1, MAX_INT) end
    check_str(c.seen_layout, 'seen_layout')
    ms(c.seen_slice_ms, 'seen_slice_ms')
    -- a Bloom filter's chunks are strings: at most 2^32 bits (SETBIT's bound)
    int(c.seen_bits, 'seen_bits', 0, 4294967296)
    int(c.seen_chunk_bits, 'seen_chunk_bits', 0, 4294967296)
    -- an exact seen-set's bucket count (a Bloom layout has none: 0)
    if c.seen_buckets ~= nil then
      int(c.seen_buckets, 'seen_buckets', c.seen_chunk_bits > 0 and 0 or 1, 4294967296)
    end
    local chunk = c.seen_chunk_bits
    if chunk > 0 and (chunk % 8 ~= 0 or c.seen_bits % chunk ~= 0) then
      refuse('seen_chunk_bits', 'expected a multiple of 8 dividing seen_bits', c.seen_chunk_bits)
    end
    ms(c.domain_ttl_ms, 'domain_ttl_ms')
    check_bool(c.auto, 'auto')
    int(c.conc_min, 'conc_min', 1, MAX_INT)
    int(c.conc_max, 'conc_max', 1, MAX_INT)
    int(c.urgent_conc, 'urgent_conc', 1, MAX_INT)
    if c.urgent_ms ~= cjson.null then
      int(c.urgent_ms, 'urgent_ms', -MAX_OFFSET_MS, MAX_OFFSET_MS)
    end
    local p = c.politeness
    if p ~= 'host' and p ~= 'domain' and p ~= 'ip' then
      check_enum(p, 'politeness', {'host', 'domain', 'ip'})
    end
    check_pools(c)
  end
end

-- Decode and check ARGV (see the header): (CFG, ARG, nil), or (nil, nil, the refusal).
-- The configuration last decoded and checked is kept by its text (`checked`): a function
-- library keeps it from one call to the next (Redis 7: engine/lua/library.py), a script run
-- by EVAL starts every call without it. No script writes into its CFG.
local decode_inputs = (function()  --@once
  local checked = {text = nil, cfg = nil}
  return function()
    local ok, cfg = true, checked.cfg
    if checked.text ~= ARGV[2] then
      ok, cfg = pcall(cjson.decode, ARGV[2])
      if not ok or type(cfg) ~= 'table' then
        return nil, nil, 'SQ_BAD_CONFIG config: expected a JSON object'
      end
      local refused = input_refusal('SQ_BAD_CONFIG', function() check_config(cfg) end)
      if refused then return nil, nil, refused end
      checked.text, checked.cfg = ARGV[2], cfg
    end
    local arg, refused
    ok, arg = pcall(cjson.decode, ARGV[3])
    if not ok or type(arg) ~= 'table' or arg[1] ~= nil then
      return nil, nil, 'SQ_BAD_ARG arguments: expected a JSON object'
    end
    refused = arg_refusal(function()
      local clock = tonumber(ARGV[1])
      if clock == nil then refuse('clock offset', 'expected an integer of ms', ARGV[1]) end
      check_int(clock, 'clock offset', -MAX_MS, MAX_MS)
      if arg.seed ~= nil then check_int(arg.seed, 'seed', 0, MAX_INT) end
    end)
    return cfg, arg, refused
  end
end)()
