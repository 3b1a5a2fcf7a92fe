-- Create a run once: record, plan, per-node state, start nodes ready and marked sent
-- (the caller sends them next; the sweeper sends again one not claimed in time), run_started.
-- ARGV[6] record fields JSON {field: string}   ARGV[7] plan JSON
-- ARGV[8] node ids JSON [..] (plan order)       ARGV[9] pending JSON {node: int}
-- ARGV[10] adjacency JSON {node: json string}   ARGV[11] start ids JSON [..]
-- ARGV[12] deadline_s (the run's deadline is NOW + deadline_s, by Redis's clock, as is
-- created_at)  ARGV[13] run id  ARGV[14] run_started event JSON
-- ARGV[15] the start guard JSON, or '' for none: {created_at, workspace, version, latest,
-- keep_s}, with KEYS[18] the stored graph's hash and KEYS[19] its run index. The run is
-- created only while the graph is the one the caller compiled (same creation time and
-- workspace; ``version`` still its latest when ``latest``, else not above it); then its id
-- joins the index (scored by Redis's clock, ids older than keep_s trimmed).
-- Returns 1 when created, 0 when the run already existed (a second call is a no-op), -1
-- when the guard refused (nothing stored).
if redis.call('EXISTS', K_RUN) == 1 then
  return 0
end
local guard = nil
if ARGV[15] and ARGV[15] ~= '' then
  guard = cjson.decode(ARGV[15])
  local head = redis.call('HMGET', KEYS[18], 'latest', 'created_at', 'workspace')
  local latest = tonumber(head[1] or '0')
  if head[2] ~= guard.created_at or (head[3] or 'default') ~= guard.workspace
      or latest < guard.version or (guard.latest and latest ~= guard.version) then
    return -1
  end
end
for field, value in pairs(cjson.decode(ARGV[6])) do
  redis.call('HSET', K_RUN, field, value)
end
local deadline = string.format('%.6f', NOW_S + tonumber(ARGV[12]))
redis.call('HSET', K_RUN, 'created_at', NOW, 'deadline', deadline)
redis.call('SET', K_PLAN, ARGV[7])
-- The hashes and sets the nodes fill (and empty) exist from now on (':' begins no node id), so the TTL set
-- below covers them and no completion has to set it again (prelude refresh_active_ttl).
redis.call('HSET', K_OUT, ':', '')
redis.call('HSET', K_LIVE, ':', '0')
redis.call('HSET', K_CLAIMS, ':stale', 0)
redis.call('HSET', K_SENT, ':', '0')  -- never pending: the sweeper sends nothing for it
redis.call('SADD', K_DISPATCHED, ':')
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
if guard then
  redis.call('ZADD', KEYS[19], NOW, ARGV[13])
  redis.call('ZREMRANGEBYSCORE', KEYS[19], '-inf', NOW_S - guard.keep_s)
end
return 1
