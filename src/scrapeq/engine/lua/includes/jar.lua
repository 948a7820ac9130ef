--[[
  The sticky session's cookie jar (session = sticky; exits.lua keeps it in the domain's dexit
  hash, field sj). Depends on check.lua.

  Stored: JSON text, a list of cookies, oldest first, each a list laid out as JAR.FIELDS:
    [name, value, domain, path, expires, flags]
      domain   the cookie's domain, lower case, no leading dot: the host that set it (host-only)
               or its Domain attribute
      path     its path (RFC 6265 5.2.4; the default-path when it had none)
      expires  epoch seconds, or null: a session cookie
      flags    a sum of JAR.FLAGS: 1 host-only (sent to that host alone, else to the domain
               and its subdomains), 2 Secure (sent over https only), 4 HttpOnly (kept, unused)
  The same layout is scrapeq/engine/lua/wire.py's JAR_COOKIE and JAR_FLAGS (the worker reads and
  builds cookies with them: runtime/session_jar.py, which decides what a cookie is and where
  it goes); tests/engine/test_wire_names.py keeps them equal, with the bounds below.

  A settle item's `jar` is what one attempt changed, not a jar: {set = [cookie, ...], del =
  [ [name, domain, path], ... ]}, each key (name, domain, path) at most once. JAR.merge applies
  it to the stored jar per key, in the settle call (atomic): a cookie set replaces the one of
  its key and becomes the newest, a deleted or expired one leaves; cookies the attempt did not
  touch stay, so attempts that started from the same copy of the jar all keep what they got.
  Bounded there: at most JAR.MAX_COOKIES cookies and JAR.MAX_BYTES bytes of text, the oldest
  dropped first. Cost: O(stored + changes), both at most JAR.MAX_COOKIES.
]]

local JAR = {  --@once
  FIELDS = {name = 1, value = 2, domain = 3, path = 4, expires = 5, flags = 6},
  FLAGS = {host_only = 1, secure = 2, http_only = 4},
  MAX_COOKIES = 50,  -- cookies kept, and cookies set (or deleted) by one attempt
  MAX_BYTES = 16384,  -- bytes of the stored text
  MAX_PAIR = 4096,  -- bytes of a cookie's name and value together (RFC 6265 6.1)
  MAX_DOMAIN = 255,
  MAX_PATH = 1024,
  MAX_EXPIRES = 253402300799,  -- 9999-12-31T23:59:59Z
}

-- A cookie's name: no controls, spaces, ';' or '='.
function JAR.check_name(v)
  check_match(v, 'name', '^[^%c%s;=]+$', 'a cookie name')
end

function JAR.check_domain(v)
  check_match(v, 'domain', '^[%w%.%-_:%[%]]+$', 'a host or domain')
  if #v > JAR.MAX_DOMAIN then refuse('domain', 'at most ' .. JAR.MAX_DOMAIN .. ' bytes', #v) end
end

function JAR.check_path(v)
  check_match(v, 'path', '^/[^%c;]*$', 'a path')
  if #v > JAR.MAX_PATH then refuse('path', 'at most ' .. JAR.MAX_PATH .. ' bytes', #v) end
end

-- One cookie of `set`. A refusal never shows its value (a secret): its size only.
function JAR.check_cookie(c)
  check_table(c)
  if #c ~= 6 then refuse(nil, 'expected [name, value, domain, path, expires, flags]', #c) end
  JAR.check_name(c[1])
  local v = c[2]
  if type(v) ~= 'string' then refuse('value', 'expected a string', type(v)) end
  if string.find(v, '[%c;]') then
    refuse('value', 'expected no control character or ;', '(' .. #v .. ' bytes)')
  end
  if #c[1] + #v > JAR.MAX_PAIR then
    refuse('value', 'name and value at most ' .. JAR.MAX_PAIR .. ' bytes', #c[1] + #v)
  end
  JAR.check_domain(c[3])
  JAR.check_path(c[4])
  if c[5] ~= cjson.null then check_int(c[5], 'expires', 0, JAR.MAX_EXPIRES) end
  check_int(c[6], 'flags', 0, 7)
end

-- One key of `del`: [name, domain, path].
function JAR.check_key(k)
  check_table(k)
  if #k ~= 3 then refuse(nil, 'expected [name, domain, path]', #k) end
  JAR.check_name(k[1])
  JAR.check_domain(k[2])
  JAR.check_path(k[3])
end

-- A settle item's `jar` (check_in(it.jar, 'jar', JAR.check)): {set = [...], del = [...]}.
function JAR.check(changes)
  if type(changes) ~= 'table' then refuse(nil, 'expected {set, del}', type(changes)) end
  for k in pairs(changes) do
    if k ~= 'set' and k ~= 'del' then refuse(nil, 'expected only set and del', k) end
  end
  for _, part in ipairs({'set', 'del'}) do
    local list = changes[part]
    if list ~= nil then
      check_list(list, part, part == 'set' and JAR.check_cookie or JAR.check_key)
      if #list > JAR.MAX_COOKIES then
        refuse(part, 'at most ' .. JAR.MAX_COOKIES .. ' cookies', #list)
      end
    end
  end
end

function JAR.key(name, domain, path)
  return name .. '\0' .. domain .. '\0' .. path
end

-- Whether a stored entry has the layout (a jar written before it, or damaged, is dropped).
function JAR.fits(c)
  return type(c) == 'table' and #c == 6 and type(c[1]) == 'string' and type(c[2]) == 'string'
    and type(c[3]) == 'string' and type(c[4]) == 'string' and type(c[6]) == 'number'
    and (c[5] == cjson.null or type(c[5]) == 'number')
end

function JAR.live(c, now_s)
  return c[5] == cjson.null or c[5] > now_s
end

-- The stored jar `text` (a string, or false/nil: none) with `changes` (checked by JAR.check)
-- merged in at `now_s` (epoch seconds): its new text, or nil when it is empty.
function JAR.merge(text, changes, now_s)
  local stored = {}
  if type(text) == 'string' then
    local ok, decoded = pcall(cjson.decode, text)
    if ok and type(decoded) == 'table' then stored = decoded end
  end
  local touched = {}
  for _, k in ipairs(changes.del or {}) do touched[JAR.key(k[1], k[2], k[3])] = true end
  for _, c in ipairs(changes.set or {}) do touched[JAR.key(c[1], c[3], c[4])] = true end
  local out = {}
  for _, c in ipairs(stored) do
    if JAR.fits(c) and JAR.live(c, now_s) and not touched[JAR.key(c[1], c[3], c[4])] then
      out[#out + 1] = c
    end
  end
  for _, c in ipairs(changes.set or {}) do
    if JAR.live(c, now_s) then out[#out + 1] = c end
  end
  -- the bounds: the newest MAX_COOKIES, then the oldest dropped until the text fits
  local first = math.max(1, #out - JAR.MAX_COOKIES + 1)
  local sizes, total = {}, 1  -- '[' and ']', and a ',' after each cookie but the last
  for i = first, #out do
    sizes[i] = #cjson.encode(out[i]) + 1
    total = total + sizes[i]
  end
  while total > JAR.MAX_BYTES and first <= #out do
    total = total - sizes[first]
    first = first + 1
  end
  if first > #out then return nil end
  local kept = {}
  for i = first, #out do kept[#kept + 1] = out[i] end
  return cjson.encode(kept)
end
