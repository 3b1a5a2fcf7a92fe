-- Record that tasks were sent for ARGV[6..] (node ids).
for i = 6, #ARGV do
  redis.call('SADD', K_DISPATCHED, ARGV[i])
end
ensure_ttl(K_DISPATCHED)
return 1
