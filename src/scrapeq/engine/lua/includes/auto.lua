--[[
  The `auto` fetcher (issue 42), its state in a domain's hash and the fleet's one decision:
  `afl` the domain's level (http absent, impersonate), `ap:<pattern>` a path pattern's own
  (browser: its pages need rendering), `acn` its auto jobs claimed above http (the
  re-checks' counter). A block moves the domain's level, a render and a re-check the
  pattern's (auto_rule.lua). The rule is auto_rule.lua's (pure); here its reads and
  writes. Functions in RULE: an expanded script's top-level locals are near their budget.

  RULE.auto_lease(job) (claim-1.lua, a job whose fetcher is `auto`: its own, its domain's or
    CFG.fetcher_auto): hands it `auto_fetcher` (what it goes through now) and `auto_level`
    (its domain's level; below it, the job is a re-check).
  RULE.auto_settle(job, it) (settle-1.lua, an item with `auto` evidence, before its exit is
    settled): moves the domain (an event `fetcher_auto`); a fingerprint block moves it only
    when every exit of its tier refused it (includes/exits.lua: the pair benches; with no
    pool, the direct connection is the one exit), BEFORE the tier climbs: the tier's benches
    are lifted (a fingerprint block is no exit's fault) and the item becomes a give-back (a
    release that spends nothing and charges nothing: the page is re-done at the new level),
    as is a block of a job fetched below its domain's level (a re-check, or a claim from
    before the move). Answers whether the item was given back.
]]
--@include rules
--@include exits
--@include auto_rule

-- The job's domain hash key, its pattern's field and {domain level, pattern level, count}.
function RULE.auto_state(job)
  local dk, field = k_dom(job.domain), 'ap:' .. RULE.auto_pattern(job.url)
  local f = redis.call('HMGET', dk, 'afl', field, 'acn')
  return dk, field, f
end

function RULE.auto_lease(job)
  local dk, _, f = RULE.auto_state(job)
  local base, count = f[1] or 'http', tonumber(f[3]) or 0
  local level = f[2] or base
  local use, after = RULE.auto_pick(level, base, count, tonumber(CFG.auto_recheck) or 0)
  if after ~= count then redis.call('HSET', dk, 'acn', after) end
  job.auto_level, job.auto_fetcher = level, use
end

-- A move to `new`: a block's is the domain's, as is a re-check's of a pattern at the
-- domain's level; a render's and a re-check's of a pattern above it are the pattern's (its
-- field goes when it comes back to the domain's level).
function RULE.auto_move(dk, field, f, new, evidence)
  if evidence == 'block' or (evidence == 'same' and not f[2]) then
    redis.call('HSET', dk, 'afl', new)
  elseif new == (f[1] or 'http') then
    redis.call('HDEL', dk, field)
  else
    redis.call('HSET', dk, field, new)
  end
end

-- Whether a ban through exit `id` leaves domain d's tier no other usable exit.
function RULE.auto_tier_refused(d, id)
  local f = EX.hash_map(k_dexit(d))
  local list = EX.usable(f)[tonumber(f.tier) or 0]
  if list == nil then return true end
  for _, e in ipairs(list) do
    if e.id ~= id then return false end
  end
  return true
end

-- The benches of domain d's current tier lifted: its exits refused the fingerprint.
function RULE.auto_unbench(d)
  local dk = k_dexit(d)
  local tier = tonumber(redis.call('HGET', dk, 'tier')) or 0
  local fields = {}
  for _, e in ipairs(CFG.exits) do
    if e[2] == tier then fields[#fields + 1] = 'b:' .. e[1] end
  end
  if #fields > 0 then call_many('HDEL', dk, fields) end
end

function RULE.auto_settle(job, it)
  local used, d = job.auto_fetcher, job.domain
  if type(used) ~= 'string' then return false end
  local dk, field, f = RULE.auto_state(job)
  local level = f[2] or f[1] or 'http'
  local block = it.auto == 'block'
  if block and job.exit ~= nil and used == level and not RULE.auto_tier_refused(d, job.exit) then
    return false  -- another exit of the tier may still serve it: an ordinary ban
  end
  local new = RULE.auto_step(level, used, it.auto)
  if new then
    RULE.auto_move(dk, field, f, new, it.auto)
    emit('fetcher_auto', d, string.format('auto fetcher of %s: %s -> %s (%s)',
      block and 'the domain' or string.sub(field, 4), level, new, it.auto))
    stat('auto_moves')
  end
  if not block or not (new or RULE.AUTO_RANK[used] < (RULE.AUTO_RANK[level] or 1)) then
    return false
  end
  if job.exit ~= nil then
    if new then RULE.auto_unbench(d) end
    it.exit = nil  -- the exit is not blamed (EX.settle_job: no request to count)
  end
  it.outcome, it.delay, it.backoff, it.reason = 'release', 0, nil, nil
  it.domain_failed, it.latency, it.overload, it.retry_after = nil, nil, nil, nil
  return true
end
