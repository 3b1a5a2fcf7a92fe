-- Create a run once: record, plan, per-node state, start nodes ready and marked sent
-- (the caller sends them next; the sweeper sends again one not claimed in time), run_started.
-- ARGV[6] record fields JSON {field: string}   ARGV[7] plan JSON
-- ARGV[8] node ids JSON [..] (plan order)       ARGV[9] pending JSON {node: int}
-- ARGV[10] adjacency JSON {node: json string}   ARGV[11] start ids JSON [..]
-- ARGV[12] deadline_s (the run's deadline is NOW + deadline_s, by Redis's clock, as is
-- created_at)  ARGV[13] run id  ARGV[14] run_started event JSON
-- Returns 1 when created, 0 when the run already existed (a second call is a no-op).
if redis.call('EXISTS', K_RUN) == 1 then
  return 0
end
for field, value in pairs(cjson.decode(ARGV[6])) do
  redis.call('HSET', K_RUN, field, value)
end
local deadline = string.format('%.6f', NOW_S + tonumber(ARGV[12]))
redis.call('HSET', K_RUN, 'created_at', NOW, 'deadline', deadline)
redis.call('SET', K_PLAN, ARGV[7])
for _, node in ipairs(cjson.decode(ARGV[8])) do
  redis.call('HSET', K_NODES, node, 'pending')
end
for node, count in pairs(cjson.decode(ARGV[9])) do
  redis.call('HSET', K_PENDING, node, count)
end
for node, adj in pairs(cjson.decode(ARGV[10])) do
  redis.call('HSET', K_ADJ, node, adj)
end
for _, node in ipairs(cjson.decode(ARGV[11])) do
  redis.call('SADD', K_READY, node)
  redis.call('SADD', K_DISPATCHED, node)
  redis.call('HSET', K_SENT, node, NOW)
end
redis.call('ZADD', K_ACTIVE, deadline, ARGV[13])
append(stamped(ARGV[14]))
expire_all(ACTIVE_TTL)
return 1
