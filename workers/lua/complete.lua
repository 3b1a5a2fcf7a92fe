-- Apply one node's completion exactly once: the Lua twin of
-- orchestrator/kernel/scheduling.py:complete, plus storage, events and the run's end.
-- ARGV[6] node id   ARGV[7] status (succeeded|failed|waiting)
-- ARGV[8] outputs JSON {port: DataValue}   ARGV[9] live ports JSON [..]
-- ARGV[10] stop_run '1'|'0'   ARGV[11] error JSON or ''   ARGV[12] run id
-- ARGV[13] run_completed JSON  ARGV[14] run_failed JSON ('' unless stop_run)
-- ARGV[15] run_waiting JSON ('' unless waiting); run-level events get the time NOW
-- ARGV[16] suspend payload JSON or ''   ARGV[17] skipped-event JSON template
-- ARGV[18..] the completion's own events (JSON), in order
-- Returns the nodes that became ready and are not yet dispatched, in plan order.
local node, status = ARGV[6], ARGV[7]
local run_status = redis.call('HGET', K_RUN, 'status')
if not run_status then
  return {}
end
local node_status = redis.call('HGET', K_NODES, node)

local function append_own_events()
  for i = 18, #ARGV do append(ARGV[i]) end
end

-- A run that already ended (cancelled, failed, timed out) records the node but
-- propagates and dispatches nothing: what did not run stays pending.
local terminal = not ACTIVE[run_status]

-- Run-level events arrive as JSON templates; stamp them with the completion's time.
local function append_stamped(event_json)
  local event = cjson.decode(event_json)
  event.timestamp = tonumber(NOW)
  append(cjson.encode(event))
end

-- Idempotency: a redelivered completion changes nothing.
if FINISHED[node_status] then
  if terminal then return {} end
  return undispatched()
end
if status == 'waiting' and (node_status == 'waiting' or terminal) then
  return {}
end

-- Suspend: keep the payload, hold no worker, count nothing down.
if status == 'waiting' then
  if ARGV[16] ~= '' then redis.call('HSET', K_SUSPEND, node, ARGV[16]) end
  redis.call('HSET', K_NODES, node, 'waiting')
  redis.call('HSET', K_RUN, 'status', 'waiting')
  append_own_events()
  append_stamped(ARGV[15])
  redis.call('DEL', K_LEASE)
  expire_all(ACTIVE_TTL)
  return {}
end

redis.call('HSET', K_OUT, node, ARGV[8])
redis.call('HSET', K_NODES, node, status)

-- A failure that stops the run, or a completion after the run ended: no countdown.
local stop = ARGV[10] == '1'
if terminal or stop then
  append_own_events()
  redis.call('DEL', K_LEASE)
  if stop and not terminal then
    redis.call('HSET', K_RUN, 'status', 'failed', 'finished_at', NOW)
    if ARGV[11] ~= '' then redis.call('HSET', K_RUN, 'error', ARGV[11]) end
    append_stamped(ARGV[14])
    redis.call('ZREM', K_ACTIVE, ARGV[12])
  end
  expire_all(RETENTION)
  return {}
end

local remaining = redis.call('HINCRBY', K_RUN, 'remaining', -1)

-- should_run: something arrived, and every required port with in-edges got a value.
local function should_run(target, adj)
  local total = 0
  for _, port in ipairs(adj.in_ports) do
    total = total + tonumber(redis.call('HGET', K_LIVE, target .. '|' .. port) or '0')
  end
  if total == 0 then return false end
  for _, port in ipairs(adj.required) do
    if tonumber(redis.call('HGET', K_LIVE, target .. '|' .. port) or '0') <= 0 then
      return false
    end
  end
  return true
end

local ready, skipped = {}, {}
local live_ports = {}
for _, port in ipairs(cjson.decode(ARGV[9])) do live_ports[port] = true end
-- Breadth-first, like scheduling.complete: skipped nodes enqueue with no live port.
local queue, head = {{node, live_ports}}, 1
while queue[head] do
  local current, ports = queue[head][1], queue[head][2]
  head = head + 1
  for _, edge in ipairs(adjacency(current).out) do
    local target, source_handle, target_handle = edge[2], edge[3], edge[4]
    if ports[source_handle] then
      redis.call('HINCRBY', K_LIVE, target .. '|' .. target_handle, 1)
    end
    local pending = redis.call('HINCRBY', K_PENDING, target, -1)
    if pending == 0 and redis.call('HGET', K_NODES, target) == 'pending' then
      local adj = adjacency(target)
      if should_run(target, adj) then
        table.insert(ready, target)
        redis.call('SADD', K_READY, target)
      else
        redis.call('HSET', K_NODES, target, 'skipped')
        remaining = redis.call('HINCRBY', K_RUN, 'remaining', -1)
        table.insert(skipped, target)
        table.insert(queue, {target, {}})
      end
    end
  end
end

append_own_events()
local template = cjson.decode(ARGV[17])
for _, target in ipairs(plan_sorted(skipped)) do
  local adj = adjacency(target)
  template.node_id, template.node_type, template.node_name = target, adj.type, adj.name
  append(cjson.encode(template))
end
redis.call('DEL', K_LEASE)

if remaining <= 0 then
  redis.call('HSET', K_RUN, 'status', 'succeeded', 'finished_at', NOW)
  append_stamped(ARGV[13])
  redis.call('ZREM', K_ACTIVE, ARGV[12])
  expire_all(RETENTION)
  return {}
end

expire_all(ACTIVE_TTL)
local out = {}
for _, n in ipairs(plan_sorted(ready)) do
  if redis.call('SISMEMBER', K_DISPATCHED, n) == 0 then table.insert(out, n) end
end
return out
