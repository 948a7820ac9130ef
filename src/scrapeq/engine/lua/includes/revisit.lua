--[[
  Revisits (CFG.rv: revisit = on), the reads and writes: the rule is revisit_rule.lua (RV.step,
  pure), whose table RV this file extends. Depends on common.lua, domain.lua, jobs.lua.

  Per-URL state: sq:{Q}:rv:<b>, a hash per bucket b (the first 4 hex digits of the URL's SHA-1:
  65,536 buckets, so at a million URLs each holds ~15 and stays a listpack), field the next 8
  bytes of the SHA-1 (raw), value 28 bytes packed big-endian (struct): last visit (s, u32),
  next due (s), tc, tu (s, u32: the intervals that ended changed, unchanged), n, x (u16), then
  the page's content signature (8 bytes; zeros: none yet). Validators (ETag, Last-Modified) are
  not kept there: they travel in the next job (fields etag, last_modified), so the state stays
  a fixed 28 bytes whatever the site sends. bench/revisit_state.py measures it.

  Per-domain, in the domain's hash: rvmu (the price mu, hours), rvl (revisit load: visits per
  hour its pages are scheduled at), rvl0 (of it, the pages with no estimated rate: new, or no
  change seen), rvh (the histogram of its estimated pages' rates RV.price solves over: JSON
  {bucket: [pages, sum of weights, sum of rates]}, buckets factors of 2 of rate / weight, at
  most 81), rvn (pages tracked), rvfw and rvw (sums of weight x
  estimated freshness and of weight), rvskip (revisits not scheduled: the domain was past
  max_bytes), bytes (bytes downloaded, counted by settle).

  RV.settle(job, it, notes): the observation of a done job (it.not_modified, it.changed
  (the handler's verdict), or it.signature compared with the stored one), the state written, and its next
  visit enqueued as a delayed job (same URL, lane, request and payload; the validators the
  fetch reported, or on a 304 those it sent; rv_due its due second), unless
    - the job belongs to a stale chain: it is a revisit (rv_due) but not the one the state
      last scheduled (another job of the URL was settled since: it took the chain over), or
    - its domain is past CFG.max_bytes (counted in rvskip; notes.revisit_skipped = 1).
  What it decided goes in `notes`, which settle-1.lua answers (wire.lua, WIRE.DONE) and the
  worker writes the page's results line from: notes.changed (1: changed, or a first visit;
  0: not), notes.not_modified. The queue's sums of the domains' figures (K.STATS: rv:load,
  rv:pages, rv:fw, rv:w) move with each domain's, for `status`.
  A scheduled revisit takes over the job's held fingerprint (unique), so a link or an enqueue
  of the URL meanwhile is answered as a duplicate of it; it bypasses the seen-set on purpose.

  RV.fresher(url, lastmod): whether a sitemap's lastmod (s) is newer than the URL's last visit
  (enqueue.lua then lets the spec through the seen-set, or, when a pending job holds the URL's
  fingerprint, makes that job due now: ENQ.sooner; the page never gets a second pending job).
]]
--@include tally
--@include revisit_rule

RV.FMT = '>IIIIHH'  --@once
RV.NOSIG = '\0\0\0\0\0\0\0\0'  -- 8 zero bytes, no string.rep: a library's load calls none  --@once

-- The bytes of hex digits h; 16 of them (a signature, a URL's field: all callers) packed as
-- two big-endian 32-bit numbers, the same 8 bytes at a fraction of a gsub's cost.
function RV.unhex(h)
  if #h == 16 then
    return struct.pack('>I4I4', tonumber(string.sub(h, 1, 8), 16),
      tonumber(string.sub(h, 9, 16), 16))
  end
  return (string.gsub(h, '%x%x', function(c) return string.char(tonumber(c, 16)) end))
end

function RV.where(url)
  local h = redis.sha1hex(url)
  return P .. 'rv:' .. tonumber(string.sub(h, 1, 4), 16), RV.unhex(string.sub(h, 5, 20))
end

-- (page, signature) of a URL: nil when not tracked.
function RV.read(key, field)
  local raw = redis.call('HGET', key, field)
  if not raw or #raw ~= 28 then return nil, RV.NOSIG end
  local last, due, tc, tu, n, x = struct.unpack(RV.FMT, raw)
  return {last = last, due = due, tc = tc, tu = tu, n = n, x = x}, string.sub(raw, 21, 28)
end

function RV.fresher(url, lastmod)
  local page = RV.read(RV.where(url))
  return page ~= nil and lastmod > page.last
end

RV.DOM = {'rvmu', 'rvl', 'rvn', 'rvfw', 'rvw', 'bytes', 'rvl0', 'rvh'}  --@once

-- A domain's RV.DOM fields as HMGET answers them, read once per call: RV.dom_write keeps
-- what it wrote (nothing else writes them); its numbers as they are, which tonumber answers
-- as it would their text (redis.call sends a number as %.17g: read back, the same number).
-- `bytes` grows with each item (settle-1.lua), so it is read again, when max_bytes needs it.
RV.doms = {}

function RV.dom_fields(dk)
  local got = RV.doms[dk]
  if got == nil then return redis.call('HMGET', dk, unpack(RV.DOM)) end
  if CFG.max_bytes ~= cjson.null then got[6] = redis.call('HGET', dk, 'bytes') end
  return got
end

function RV.dom_write(dk, d)
  local h = next(d.h) and cjson.encode(d.h) or '{}'
  redis.call('HSET', dk, 'rvmu', d.mu, 'rvl', d.load, 'rvn', d.n, 'rvfw', d.fw, 'rvw', d.w,
    'rvl0', d.l0, 'rvh', h)
  RV.doms[dk] = {d.mu, d.load, d.n, d.fw, d.w, false, d.l0, h}
end

-- The queue's sums of its domains' figures (K.STATS, for status): what a visit changed.
RV.SUMS = {{'load', 'rv:load'}, {'n', 'rv:pages'}, {'fw', 'rv:fw'}, {'w', 'rv:w'}}  --@once

function RV.total(old, new)
  for _, f in ipairs(RV.SUMS) do
    local delta = new[f[1]] - (old[f[1]] or 0)
    if delta ~= 0 then TALLY.addf(K.STATS, f[2], delta) end
  end
end

-- Whether a visit found the page changed: true, false, or nil when unknown (a first visit,
-- or no signature to compare). A 304 or the handler's word decide, else the signatures.
function RV.changed(page, sig, it)
  if not page then return nil end
  if it.not_modified == true or it.changed == false then return false end
  if it.changed == true then return true end  -- the handler said so
  if it.signature and sig ~= RV.NOSIG then return RV.unhex(it.signature) ~= sig end
  return nil
end

function RV.settle(job, it, notes)
  local key, field = RV.where(job.url)
  local page, sig = RV.read(key, field)
  local changed = RV.changed(page, sig, it)
  -- the results line's (settle-1.lua answers it): a first visit is a change
  notes.changed = changed == false and 0 or 1
  if it.not_modified == true then notes.not_modified = 1 end
  if it.signature then sig = RV.unhex(it.signature) end
  local dk = k_dom(job.domain)
  local got = RV.dom_fields(dk)
  local hist = got[8] and cjson.decode(got[8]) or {}
  local dom = {mu = tonumber(got[1]), load = tonumber(got[2]), n = tonumber(got[3]),
    fw = tonumber(got[4]), w = tonumber(got[5]), l0 = tonumber(got[7]), h = hist}
  local weight = tonumber(job.weight) or 1
  local p, d, interval = RV.step(page, dom, {now = math.floor(NOW / 1000), changed = changed},
    {budget = CFG.rv_budget, min = CFG.rv_min_ms / 1000, max = CFG.rv_max_ms / 1000,
      w = weight})
  local stale = job.rv_due ~= nil and (page == nil or job.rv_due ~= page.due)
  local over = CFG.max_bytes ~= cjson.null and (tonumber(got[6]) or 0) >= CFG.max_bytes
  if stale or over then
    if over then redis.call('HINCRBY', dk, 'rvskip', 1) end
    -- observed, the schedule kept: the chain's current revisit stays due when it is
    if stale and page and page.due > p.last then p.due = page.due end
  end
  redis.call('HSET', key, field, struct.pack(RV.FMT, p.last, p.due, p.tc, p.tu, p.n, p.x) .. sig)
  RV.dom_write(dk, d)
  RV.total(dom, d)
  if over then notes.revisit_skipped = 1 end
  if stale or over then return nil end
  local etag, lm = it.etag, it.last_modified
  if it.not_modified == true then
    etag, lm = etag or job.etag, lm or job.last_modified
  end
  local n = fresh_numbers('seq', 1, 1000)
  local hex = string.format('%x', n)
  local new = {id = string.char(96 + #hex) .. hex .. (ARG.pid or ''), url = job.url,
    domain = job.domain, lane = job.lane, off = job.off, attempts = 0,
    max_attempts = job.max_attempts, throttles = 0, token = 0, created = NOW,
    payload = job.payload, depth = job.depth, parent = job.parent, request = job.request,
    parent_url = job.parent_url, weight = job.weight, etag = etag, last_modified = lm,
    rv_due = p.due}
  if type(job.fp) == 'string' and redis.call('HGET', K.UNIQUE, job.fp) == job.id then
    redis.call('HSET', K.UNIQUE, job.fp, new.id)
    new.fp, new.fpw = job.fp, job.fpw
  end
  registry_add(job.domain)
  put_delayed(new, NOW + interval * 1000)
  save_job(new)
  TALLY.add(K.STATS, 'revisits')
  return new.id
end
