-- Cluster-wide rate limits: GCRA with reservations, adaptive after provider 429s.
-- One call acquires every limit a request needs, all or nothing in effect.
-- KEYS[i]: the state hash of limit i. ARGV[1]: one JSON object:
--   op: 'acquire' | 'adjust' | 'penalize'
--   limits: [{rate, per_s, cost, burst, learn}] (one per key; learn: the key has no declared
--           rate, it runs at what it learned from 429s, unlimited until the first)
--   holder: who asks (a node execution key): a refused acquire reserves the slot for it, and
--           its next acquire at or after that time takes the reservation instead of a new slot
--   once: (acquire) the holder is charged once however often it asks (a node's own limits:
--         an execution run again after its worker died); false for a provider's requests,
--         each of which is a new call
--   delta: (adjust) units to add (+) or give back (-), e.g. real tokens minus the estimate
--   retry_after_s: (penalize) what the provider's Retry-After said (0: none)
--   probe: (acquire) a grant changes nothing (see below); a refusal is recorded as usual
--   ttl_s: how long an idle state hash lives
-- State hash fields: tat (theoretical arrival time, s), blocked (no grant before, s),
--   learned (rate per per_s learned from 429s, 0 none), cut (when learned was last cut, s),
--   b:<second mod 60> / s:<second mod 60> units granted in that second and which second it
--   was (a ring of the last 60 s, for learning). KEYS[i]..':r' a zset holder -> reserved time
--   (reservations never taken, of holders that died or whose run ended, are dropped after
--   STALE_S). KEYS[i]..':g' a zset holder -> when it was granted (kept STALE_S): the same
--   holder asking again (its node re-run after its worker died) is granted without a new
--   charge, so an execution that runs twice is counted once.
-- Returns {wait_ms, limiting index (1-based, 0 when granted), effective rate of each limit...}
local args = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local ttl = math.max(1, math.ceil(args.ttl_s or 3600))
local WINDOW = 60  -- seconds of grant history kept for learning a rate from a 429
local STALE_S = 600
local SMOOTH_S = 1  -- grants that fall due together (late holders) go out at most this far ahead of the rate

local function num(v, d) return tonumber(v) or d end

local function effective_rate(limit, state)
  if limit.learn then return state.learned end
  return limit.rate
end

local function load(key)
  local f = redis.call('HMGET', key, 'tat', 'blocked', 'learned', 'cut', 'gtat')
  return {tat = num(f[1], 0), blocked = num(f[2], 0), learned = num(f[3], 0), cut = num(f[4], 0),
          gtat = num(f[5], 0)}
end

if args.op == 'penalize' then
  local key, limit = KEYS[1], args.limits[1]
  local state = load(key)
  local blocked = math.max(state.blocked, now + math.max(0, num(args.retry_after_s, 0)))
  redis.call('HSET', key, 'blocked', string.format('%.6f', blocked))
  -- Cut the rate once per cool-down, not once per 429 of the same burst.
  local cooldown = math.max(1, num(args.retry_after_s, 0))
  if now - state.cut >= cooldown then
    local learned = state.learned
    if not limit.learn then
      -- A declared quota: run 20% below where it ran, never below half of it.
      learned = math.max((learned > 0 and learned or limit.rate) * 0.8, limit.rate * 0.5)
    elseif learned <= 0 then
      -- What was granted over the last WINDOW seconds, a little under, per per_s.
      local granted = 0
      for slot = 0, WINDOW - 1 do
        local f = redis.call('HMGET', key, 's:' .. slot, 'b:' .. slot)
        if tonumber(f[1]) and tonumber(f[1]) > now - WINDOW then granted = granted + num(f[2], 0) end
      end
      learned = math.max(1, granted * 0.9 * num(limit.per_s, 60) / WINDOW)
    else
      learned = math.max(learned * 0.8, 1)
    end
    redis.call('HSET', key, 'learned', string.format('%.6f', learned), 'cut', string.format('%.6f', now))
  end
  redis.call('EXPIRE', key, ttl)
  return {0, 0}
end

if args.op == 'adjust' then
  local key, limit = KEYS[1], args.limits[1]
  local state = load(key)
  local rate = effective_rate(limit, state)
  if rate and rate > 0 then
    local interval = limit.per_s / rate
    local tat = math.max(state.tat, now) + num(args.delta, 0) * interval
    redis.call('HSET', key, 'tat', string.format('%.6f', tat))
    redis.call('EXPIRE', key, ttl)
  end
  return {0, 0}
end

-- acquire
local holder = args.holder or ''
local states, plans = {}, {}
local wait, limiting = 0, 0
local reply_rates = {}
for i, limit in ipairs(args.limits) do
  local key = KEYS[i]
  local state = load(key)
  states[i] = state
  local rate = effective_rate(limit, state)
  -- A configured limit that learned a lower rate from 429s runs at the lower one.
  if not limit.learn and state.learned > 0 then rate = math.min(rate, state.learned) end
  reply_rates[i] = tostring(rate or 0)
  redis.call('ZREMRANGEBYSCORE', key .. ':r', '-inf', now - STALE_S)
  redis.call('ZREMRANGEBYSCORE', key .. ':p', '-inf', now - STALE_S)
  local reserved = holder ~= '' and tonumber(redis.call('ZSCORE', key .. ':r', holder)) or nil
  local promised = holder ~= '' and tonumber(redis.call('ZSCORE', key .. ':p', holder)) or nil
  local granted_before = args.once and holder ~= '' and redis.call('ZSCORE', key .. ':g', holder) or nil
  if granted_before then
    plans[i] = {kind = 'again', at = now}
  elseif promised then
    -- a grant slot of the spacing below was set aside for it: it goes out then, unchecked
    plans[i] = {kind = 'promised', at = promised}
    if promised - now > wait then wait, limiting = promised - now, i end
  elseif reserved then
    plans[i] = {kind = 'reserved', at = reserved}
    if reserved - now > wait then wait, limiting = reserved - now, i end
  elseif rate and rate > 0 then
    local interval = limit.per_s / rate
    local cost = num(limit.cost, 1)
    local base = math.max(state.tat, now, state.blocked)
    local new_tat = base + cost * interval
    local allow_at = new_tat - math.max(num(limit.burst, 1), cost) * interval
    allow_at = math.max(allow_at, state.blocked)
    plans[i] = {kind = 'slot', tat = new_tat, at = allow_at}
    if allow_at - now > wait then wait, limiting = allow_at - now, i end
  else
    local at = math.max(now, state.blocked)
    plans[i] = {kind = 'free', at = at}
    if at - now > wait then wait, limiting = at - now, i end
  end
end

-- The grants themselves are spaced too ('gtat', a second GCRA on what actually goes out):
-- holders that come back late all at once (a loaded worker) trickle out at the rate instead
-- of bunching in the provider's window; they keep their reservations meanwhile.
-- A holder spaced out this way is promised its grant slot (':p', and 'gtat' moves past it),
-- so it is refused once, not again and again with every holder of the same late burst.
local grant_at, promise_at = {}, {}
if wait <= 0 then
  for i, limit in ipairs(args.limits) do
    local rate = tonumber(reply_rates[i]) or 0
    if rate > 0 and plans[i].kind ~= 'again' and plans[i].kind ~= 'promised' then
      local interval = limit.per_s / rate
      local cost = num(limit.cost, 1)
      local g = math.max(states[i].gtat, now) + cost * interval
      grant_at[i] = g
      local early = g - now - math.max(SMOOTH_S, cost * interval)
      if early > 0 then promise_at[i] = now + early end
      if early > wait then wait, limiting = early, i end
    end
  end
end

-- A probe (asked before the caller builds what it will send) that would be granted changes
-- nothing: the real acquire, right before the request, takes the grant. A refused probe
-- reserves (or is promised) its slot like any refusal.
if args.probe and wait <= 0 then
  local reply = {0, 0}
  for _, rate in ipairs(reply_rates) do table.insert(reply, rate) end
  return reply
end

local second = math.floor(now)
local slot = second % WINDOW
for i, limit in ipairs(args.limits) do
  local key, plan = KEYS[i], plans[i]
  if plan.kind == 'slot' then
    redis.call('HSET', key, 'tat', string.format('%.6f', plan.tat))
  end
  if plan.kind == 'again' then
    -- counted when it was first granted
  elseif wait > 0 then
    -- Refused: the slot is this holder's at its time (no thundering herd of re-asks).
    if holder ~= '' and plan.kind ~= 'reserved' and plan.kind ~= 'promised' then
      redis.call('ZADD', key .. ':r', string.format('%.6f', now + wait), holder)
      redis.call('EXPIRE', key .. ':r', ttl + STALE_S)
    end
    if holder ~= '' and promise_at[i] then
      redis.call('ZADD', key .. ':p', string.format('%.6f', promise_at[i]), holder)
      redis.call('EXPIRE', key .. ':p', ttl + STALE_S)
      redis.call('HSET', key, 'gtat', string.format('%.6f', grant_at[i]))
    end
  else
    if plan.kind == 'reserved' then redis.call('ZREM', key .. ':r', holder) end
    if plan.kind == 'promised' then
      redis.call('ZREM', key .. ':p', holder)
      redis.call('ZREM', key .. ':r', holder)
    end
    if grant_at[i] then redis.call('HSET', key, 'gtat', string.format('%.6f', grant_at[i])) end
    if args.once and holder ~= '' then
      redis.call('ZREMRANGEBYSCORE', key .. ':g', '-inf', now - STALE_S)
      redis.call('ZADD', key .. ':g', string.format('%.6f', now), holder)
      redis.call('EXPIRE', key .. ':g', ttl)
    end
    if tonumber(redis.call('HGET', key, 's:' .. slot)) ~= second then
      redis.call('HSET', key, 's:' .. slot, second, 'b:' .. slot, 0)
    end
    redis.call('HINCRBY', key, 'b:' .. slot, num(limit.cost, 1))
    -- Additive increase of a learned rate, back towards the declared one (or unlimited).
    local state = states[i]
    if state.learned > 0 then
      -- declared: back to the quota within ~250 grants; learned: probe upwards slowly
      local grown = limit.learn and (state.learned * 1.0005 + 0.001) or (state.learned + limit.rate * 0.002)
      if not limit.learn and grown >= limit.rate then
        redis.call('HDEL', key, 'learned')
      else
        redis.call('HSET', key, 'learned', string.format('%.6f', grown))
      end
    end
  end
  redis.call('EXPIRE', key, ttl)
end
local reply = {math.ceil(wait * 1000), limiting}
for _, rate in ipairs(reply_rates) do table.insert(reply, rate) end
return reply
