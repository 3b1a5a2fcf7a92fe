-- Resume a waiting node. ARGV[6] node id  ARGV[7] resume input JSON  ARGV[8] run_resumed JSON
-- Returns 1 when resumed, 0 when the node is not waiting or the run is not active.
local node = ARGV[6]
local status = RUN.status
if not status or not ACTIVE[status] then
  return 0
end
if redis.call('HGET', K_NODES, node) ~= 'waiting' then
  return 0
end
local payload = redis.call('HGET', K_SUSPEND, node) or 'null'
-- both parts are JSON already: splice them instead of re-encoding (cjson loses precision)
redis.call('HSET', K_RESUME, node, '{"payload":' .. payload .. ',"input":' .. ARGV[7] .. '}')
ensure_ttl(K_RESUME)
redis.call('HSET', K_NODES, node, 'pending')
set_run_status('running')
redis.call('SREM', K_DISPATCHED, node)
redis.call('SADD', K_READY, node)
append(ARGV[8])
return settled(1)
