-- Record that tasks are sent for ARGV[6..] (node ids), and when (Redis's clock): the
-- claim clears that time, so the sweeper can tell a message lost in transit.
for i = 6, #ARGV do
  redis.call('SADD', K_DISPATCHED, ARGV[i])
  redis.call('HSET', K_SENT, ARGV[i], NOW)
end
return 1  -- both keys exist since create_run, with its TTL
