-- A workspace's ceiling of nodes in flight, cluster-wide (orchestrator/store/ceiling.py).
-- KEYS[1] zset  holder -> its unit's lease expiry (ms, Redis clock)
-- KEYS[2] zset  holder -> when it was last refused (ms): the nodes waiting for a unit
-- KEYS[3] hash  start:<holder> -> when it entered (ms); avg -> moving average of a hold (ms)
-- ARGV[1] JSON  {op = enter | leave | renew, holder, holders, max, lease_ms, min_wait_ms,
--                max_wait_ms, ttl_s}
-- enter: {wait_ms (0: granted), in flight, waiting}; leave / renew: {0, in flight, 0}.
local a = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = math.ceil(a.ttl_s)

local function touch()
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
end

if a.op == 'renew' then
  for _, h in ipairs(a.holders) do
    redis.call('ZADD', KEYS[1], 'XX', now + a.lease_ms, h)  -- a lapsed unit is not taken back
  end
  touch()
  return {0, redis.call('ZCARD', KEYS[1]), 0}
end

if a.op == 'leave' then
  local start = redis.call('HGET', KEYS[3], 'start:' .. a.holder)
  if redis.call('ZREM', KEYS[1], a.holder) == 1 and start then
    local held = now - tonumber(start)
    local avg = tonumber(redis.call('HGET', KEYS[3], 'avg') or held)
    redis.call('HSET', KEYS[3], 'avg', math.floor(avg * 0.9 + held * 0.1))
  end
  redis.call('HDEL', KEYS[3], 'start:' .. a.holder)
  return {0, redis.call('ZCARD', KEYS[1]), 0}
end

-- enter: units whose lease lapsed (their worker died) come back first
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #lapsed > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for _, h in ipairs(lapsed) do redis.call('HDEL', KEYS[3], 'start:' .. h) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)  -- waiters that never came back
local mine = redis.call('ZSCORE', KEYS[1], a.holder)
local count = redis.call('ZCARD', KEYS[1])
if mine or count < a.max then
  redis.call('ZADD', KEYS[1], now + a.lease_ms, a.holder)
  if not mine then
    redis.call('HSET', KEYS[3], 'start:' .. a.holder, now)
    count = count + 1
  end
  redis.call('ZREM', KEYS[2], a.holder)
  touch()
  return {0, count, redis.call('ZCARD', KEYS[2])}
end
redis.call('ZADD', KEYS[2], now, a.holder)
local waiting = redis.call('ZCARD', KEYS[2])
-- about when the waiters ahead have had their turn: `max` units free per average hold
local avg = tonumber(redis.call('HGET', KEYS[3], 'avg') or a.min_wait_ms)
local wait = math.floor(avg * waiting / a.max)
touch()
return {math.max(a.min_wait_ms, math.min(a.max_wait_ms, wait)), count, waiting}
