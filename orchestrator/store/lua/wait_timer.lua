-- Schedule a waiting node's wake-up (no prelude: KEYS are its own).
-- KEYS[1] {p}:waits:due (zset: "run\nnode" -> due time, epoch s on Redis's clock)
-- ARGV[1] member  ARGV[2] 'after' (ARGV[3] seconds from now) or 'at' (ARGV[3] epoch s)
-- ARGV[4] TTL s of the set (refreshed: it outlives every run that waits in it)
-- NX: a node that suspends again (its first suspension's worker was lost) keeps the
-- first due time. Returns the due time.
local due
if ARGV[2] == 'after' then
  local t = redis.call('TIME')
  due = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[3])
else
  due = tonumber(ARGV[3])
end
redis.call('ZADD', KEYS[1], 'NX', string.format('%.6f', due), ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return tostring(redis.call('ZSCORE', KEYS[1], ARGV[1]))
