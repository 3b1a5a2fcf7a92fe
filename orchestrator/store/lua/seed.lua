-- Store outputs of nodes a rerun reuses (they will not run in this run).
-- ARGV[6..] pairs: node id, outputs JSON. Existing entries are kept (idempotent).
if redis.call('EXISTS', K_RUN) == 0 then
  return 0
end
for i = 6, #ARGV, 2 do
  redis.call('HSETNX', K_OUT, ARGV[i], ARGV[i + 1])
end
ensure_ttl(K_OUT)
return 1
