-- Extend the leases this worker still holds (no prelude: KEYS are the lease keys only).
-- KEYS[i] a node's lease key   ARGV[1] worker id   ARGV[2] lease ms
-- Returns how many leases the worker held.
local held = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    held = held + 1
  end
end
return held
