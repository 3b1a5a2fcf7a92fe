-- Extend the node's lease if this worker still holds it. ARGV[6] worker  ARGV[7] lease ms
if redis.call('GET', K_LEASE) == ARGV[6] then
  redis.call('PEXPIRE', K_LEASE, ARGV[7])
  return 1
end
return 0
