-- May this worker run the node now? Atomic lease + claim count + the `started` event.
-- ARGV[6] one JSON object: {node, worker, lease_ms, started (the event JSON, a string),
--   read: [node ids whose stored outputs the step reads (its flow sources and the nodes
--   its expressions name), returned with a granted claim to save a round trip]}
-- Returns {kind, claims, pending_dispatch...} with kind run|done|busy|closed, or
-- {'early', claims, ms left} for a retry not due yet (by Redis's clock; nothing changes);
-- a granted claim returns {'run', claims, run_input JSON, session_id, resume JSON or '',
-- attempt, token, workspace, node, outputs JSON, ...} so the step needs no further read of the run
-- record. token is the claim's fencing token: one more than the node's previous claim's.
local args = cjson.decode(ARGV[6])
local node = args.node
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
-- A live lease is busy whoever holds it (this worker too: a redelivered copy of a node it
-- runs must not supersede the execution under way).
if redis.call('EXISTS', K_LEASE) == 1 then
  return {'busy', 0}
end
-- A suspended node holds no worker; it runs again only after resume_node.
if node_status == 'waiting' then
  return {'busy', 0}
end
-- A retry runs when it is due by this clock, whatever the clock of the host that got it.
if node_status == 'retrying' then
  local left_ms = math.ceil((tonumber(redis.call('HGET', K_CLAIMS, 'retry_at:' .. node) or '0') - NOW_S) * 1000)
  if left_ms > 0 then
    return {'early', 0, left_ms}
  end
end
local token = redis.call('HINCRBY', K_CLAIMS, 'token:' .. node, 1)
redis.call('SET', K_LEASE, token, 'PX', args.lease_ms)
-- A claimed node is dispatched by definition (a node run in-process is claimed without a
-- task), and its message arrived: no longer one the sweeper may have to send again.
redis.call('SADD', K_DISPATCHED, node)
redis.call('HDEL', K_SENT, node)
local claims = redis.call('HINCRBY', K_CLAIMS, node, 1)
local attempt = tonumber(redis.call('HGET', K_CLAIMS, 'attempt:' .. node) or '1')
redis.call('HSET', K_NODES, node, 'running')
local resume = redis.call('HGET', K_RESUME, node)
if claims == 1 and attempt == 1 then
  append(stamped(args.started))
else
  local event = cjson.decode(args.started)
  event.attempt, event.timestamp = attempt, NOW_S
  if node_status ~= 'retrying' and claims > 1 then
    -- the previous holder died (lease expired) or the task was redelivered: say so
    if type(event.data) ~= 'table' then event.data = {} end
    if resume then event.data.resumed = true else event.data.reclaimed = true end
  end
  append(cjson.encode(event))
end
local context = redis.call('HMGET', K_RUN, 'run_input', 'session_id', 'workspace')
local reply = {'run', claims, context[1] or 'null', context[2] or '', resume or '', attempt, token,
               context[3] or ''}
for _, source in ipairs(args.read) do
  local blob = redis.call('HGET', K_OUT, source)
  if blob then
    table.insert(reply, source)
    table.insert(reply, blob)
  end
end
return reply
