-- The start guard alone, on the graph's slot (a Redis Cluster: create.lua cannot reach the
-- graph's keys from the run's bucket). No prelude: KEYS are its own.
-- KEYS[1] the stored graph's hash   KEYS[2] its run index
-- ARGV[1] the guard JSON {created_at, workspace, version, latest, keep_s}   ARGV[2] run id
-- ARGV[3] '1': index the run (the check before create), '0': check only (after it)
-- Returns 1 when the graph is the one the caller compiled, -1 when not (nothing stored).
local guard = cjson.decode(ARGV[1])
local head = redis.call('HMGET', KEYS[1], 'latest', 'created_at', 'workspace')
local latest = tonumber(head[1] or '0')
if head[2] ~= guard.created_at or (head[3] or 'default') ~= guard.workspace or latest < guard.version then
  return -1
end
if ARGV[3] == '1' then
  if guard.latest and latest ~= guard.version then return -1 end
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6
  redis.call('ZADD', KEYS[2], string.format('%.6f', now), ARGV[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - guard.keep_s)
end
return 1
