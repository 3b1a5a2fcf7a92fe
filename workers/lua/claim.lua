-- May this worker run the node now? Atomic lease + claim count + first `started` event.
-- ARGV[6] node id  ARGV[7] worker id  ARGV[8] lease ms
-- ARGV[9] started event JSON  ARGV[10] the same, data.reclaimed  ARGV[11] data.resumed
-- ARGV[12..] node ids whose stored outputs the step reads (its flow sources and the nodes
-- its expressions name), returned with a granted claim to save a round trip.
-- Returns {kind, claims, pending_dispatch...} with kind run|done|busy|closed; a granted
-- claim returns {'run', claims, run_input JSON, session_id, resume JSON or ''} so the
-- step needs no further read of the run record.
local node, worker = ARGV[6], ARGV[7]
local status = redis.call('HGET', K_RUN, 'status')
if not status or not ACTIVE[status] then
  return {'closed', 0}
end
if redis.call('HEXISTS', K_ADJ, node) == 0 then
  return {'closed', 0}
end
local node_status = redis.call('HGET', K_NODES, node)
if FINISHED[node_status] then
  local out = {'done', tonumber(redis.call('HGET', K_CLAIMS, node) or '0')}
  for _, n in ipairs(undispatched()) do table.insert(out, n) end
  return out
end
local holder = redis.call('GET', K_LEASE)
if holder and holder ~= worker then
  return {'busy', 0}
end
-- A suspended node holds no worker; it runs again only after resume_node.
if node_status == 'waiting' then
  return {'busy', 0}
end
redis.call('SET', K_LEASE, worker, 'PX', ARGV[8])
-- A claimed node is dispatched by definition (a fused node is claimed without a task).
redis.call('SADD', K_DISPATCHED, node)
local claims = redis.call('HINCRBY', K_CLAIMS, node, 1)
ensure_ttl(K_CLAIMS)
redis.call('HSET', K_NODES, node, 'running')
if claims == 1 then
  append(ARGV[9])
elseif redis.call('HEXISTS', K_RESUME, node) == 1 then
  append(ARGV[11])
else
  -- the previous holder died (lease expired) or the task was redelivered: say so
  append(ARGV[10])
end
local context = redis.call('HMGET', K_RUN, 'run_input', 'session_id')
local reply = {'run', claims, context[1] or 'null', context[2] or '', redis.call('HGET', K_RESUME, node) or ''}
for i = 12, #ARGV do
  local blob = redis.call('HGET', K_OUT, ARGV[i])
  if blob then
    table.insert(reply, ARGV[i])
    table.insert(reply, blob)
  end
end
return reply
