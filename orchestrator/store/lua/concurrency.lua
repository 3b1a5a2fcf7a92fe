-- Concurrency keys of runs: how many runs of one (graph, key) are in progress, and the
-- runs waiting for a place, per strategy. ARGV[1] one JSON object:
--   op: 'admit' | 'release' | 'position' | 'unhold'
--   scope (workspace:graph), key (the run's evaluated key), run, max, strategy
--   (queue | round_robin | cancel_in_progress | cancel_newest), start: [start node ids]
-- KEYS[1..4]: the run's record, ready, dispatched and sent keys (admit: a held run is
-- 'queued' and its start nodes are taken off them, so nothing (the sweeper included) sends them; release gives
-- the keys of nothing: the runs it starts are put back by the caller's 'unhold').
-- KEYS[5]: the prefix of this product's concurrency keys ({p}:cc).
-- A Redis Cluster splits the run's part from the key's (two slots): 'hold' (KEYS[1..4]) records
-- the rule on the run and, with args.hold, holds it; 'admit' with args.split (KEYS[1] the prefix
-- alone) then decides on the key's slot without touching the run; 'unhold' starts it again.
-- Keys under KEYS[5]..':'..scope: ':run:'..key zset running runs (score: admission order);
-- ':q:'..key zset queued runs (score: arrival); ':all' zset running runs of every key
-- (round_robin: max counts all keys); ':rr' list of keys with queued runs, in turn order;
-- ':seq' counter. Each expires with ttl_s after its last change.
-- admit returns {'start', cancelled runs...} | {'queued', position} | {'refused'}
-- release returns {runs to start...} (its own run removed from wherever it was)
-- position returns {position} (0: not queued)
local args = cjson.decode(ARGV[1])
local base = (KEYS[5] or KEYS[1]) .. ':' .. args.scope
local RUN, Q, ALL, RR, SEQ = base .. ':run:' .. args.key, base .. ':q:' .. args.key, base .. ':all',
  base .. ':rr', base .. ':seq'
local ttl = math.max(60, math.ceil(args.ttl_s or 86400))
local rr = args.strategy == 'round_robin'

local function touch(...)
  for _, k in ipairs({...}) do
    if redis.call('EXISTS', k) == 1 then redis.call('EXPIRE', k, ttl) end
  end
end

local function in_progress()
  if rr then return redis.call('ZCARD', ALL) end
  return redis.call('ZCARD', RUN)
end

local function start(run, key)
  local seq = redis.call('INCR', SEQ)
  redis.call('ZADD', base .. ':run:' .. key, seq, run)
  redis.call('ZADD', ALL, seq, run)
  touch(base .. ':run:' .. key, ALL, SEQ)
end

local function position(run)
  local rank = redis.call('ZRANK', Q, run)
  if not rank then return 0 end
  return rank + 1
end

if args.op == 'unhold' then
  -- a held run starts: its start nodes become ready and are marked sent (Redis's clock),
  -- as create.lua does, so the sweeper sends one whose message is lost
  local t = redis.call('TIME')
  local now = string.format('%d.%06d', t[1], t[2])
  if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end  -- it ended meanwhile
  redis.call('HSET', KEYS[1], 'status', 'running')
  for _, node in ipairs(args.start) do
    redis.call('SADD', KEYS[2], node)
    redis.call('SADD', KEYS[3], node)
    redis.call('HSET', KEYS[4], node, now)
  end
  return 1
end

-- a held run: its start nodes are not ready (nor dispatched, nor sent) until it starts
local function hold_start_nodes()
  for _, node in ipairs(args.start) do
    redis.call('SREM', KEYS[2], node)
    redis.call('SREM', KEYS[3], node)
    redis.call('HDEL', KEYS[4], node)
  end
  redis.call('HSET', KEYS[1], 'status', 'queued')
end

if args.op == 'hold' then
  redis.call('HSET', KEYS[1], 'concurrency', cjson.encode({scope = args.scope, key = args.key}))
  if args.hold then
    hold_start_nodes()
  end
  return 1
end

if args.op == 'position' then
  return {position(args.run)}
end

if args.op == 'admit' then
  if not args.split then
    redis.call('HSET', KEYS[1], 'concurrency', cjson.encode({scope = args.scope, key = args.key}))
  end
  local waiting = rr and redis.call('LLEN', RR) > 0 or (not rr and redis.call('ZCARD', Q) > 0)
  if in_progress() < args.max and not waiting then
    start(args.run, args.key)
    return {'start'}
  end
  if args.strategy == 'cancel_newest' then
    return {'refused'}
  end
  if args.strategy == 'cancel_in_progress' then
    start(args.run, args.key)
    local out = {'start'}
    while redis.call('ZCARD', RUN) > args.max do
      local oldest = redis.call('ZRANGE', RUN, 0, 0)[1]
      redis.call('ZREM', RUN, oldest)
      redis.call('ZREM', ALL, oldest)
      table.insert(out, oldest)
    end
    return out
  end
  -- queue / round_robin: hold the run (its start nodes are not ready until it starts)
  if not args.split then
    hold_start_nodes()
  end
  local seq = redis.call('INCR', SEQ)
  redis.call('ZADD', Q, seq, args.run)
  if rr and redis.call('ZCARD', Q) == 1 then redis.call('RPUSH', RR, args.key) end
  touch(Q, RR, SEQ)
  return {'queued', position(args.run)}
end

-- release: the run ended (or was cancelled while queued); fill the places it frees
redis.call('ZREM', RUN, args.run)
redis.call('ZREM', ALL, args.run)
if redis.call('ZREM', Q, args.run) == 1 and rr and redis.call('ZCARD', Q) == 0 then
  redis.call('LREM', RR, 0, args.key)
end
local started = {}
if rr then
  while redis.call('ZCARD', ALL) < args.max and redis.call('LLEN', RR) > 0 do
    local key = redis.call('LPOP', RR)
    local queue = base .. ':q:' .. key
    local next_run = redis.call('ZPOPMIN', queue)[1]
    if next_run then
      start(next_run, key)
      table.insert(started, next_run)
    end
    if redis.call('ZCARD', queue) > 0 then redis.call('RPUSH', RR, key) end
  end
else
  while redis.call('ZCARD', RUN) < args.max and redis.call('ZCARD', Q) > 0 do
    local next_run = redis.call('ZPOPMIN', Q)[1]
    start(next_run, args.key)
    table.insert(started, next_run)
  end
end
touch(Q, RR)
return started
