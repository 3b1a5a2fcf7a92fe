-- Shared by every script (workers/store.py prepends it). Keys and the first ARGVs have
-- one fixed layout so each script reads the run's keys by name:
--   KEYS[1..14]  the run's keys (Keys.run_keys order, ending adj, suspend, resume, queue)
--   KEYS[15]     {p}:runs:active          KEYS[16]  {p}:runs:queued
--   KEYS[17]     the node's lease key (if any)
--   ARGV[1] events maxlen   ARGV[2] notify channel   ARGV[3] active TTL s
--   ARGV[4] retention TTL s ARGV[5] now (epoch s)     ARGV[6..] script-specific
local K_RUN, K_PLAN, K_NODES, K_PENDING, K_LIVE, K_OUT, K_CLAIMS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local K_READY, K_DISPATCHED, K_EVENTS, K_ADJ, K_SUSPEND, K_RESUME = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local K_QUEUE = KEYS[14]
local K_ACTIVE, K_QUEUED, K_LEASE = KEYS[15], KEYS[16], KEYS[17]
local RUN_KEY_COUNT = 14
local MAXLEN, CHANNEL, ACTIVE_TTL, RETENTION = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local NOW = ARGV[5]

local ACTIVE = {queued = true, running = true, waiting = true}
local FINISHED = {succeeded = true, failed = true, skipped = true, not_run = true}
local UNSTARTED = {pending = true, retrying = true, waiting = true}

-- Append one event (already JSON) and wake subscribers; pub/sub is only a hint.
local function append(event_json)
  local id = redis.call('XADD', K_EVENTS, 'MAXLEN', '~', MAXLEN, '*', 'e', event_json)
  redis.call('PUBLISH', CHANNEL, id)
  return id
end

-- Every run key gets the same TTL: active while the run runs, retention once it ended.
local function expire_all(ttl_s)
  for i = 1, RUN_KEY_COUNT do
    redis.call('EXPIRE', KEYS[i], ttl_s)
  end
end

-- A key created after create_run inherits the run record's remaining TTL.
local function ensure_ttl(key)
  if redis.call('PTTL', key) == -1 then
    local ttl = redis.call('PTTL', K_RUN)
    if ttl > 0 then
      redis.call('PEXPIRE', key, ttl)
    else
      redis.call('EXPIRE', key, RETENTION)
    end
  end
end

local function adjacency(node)
  local raw = redis.call('HGET', K_ADJ, node)
  if not raw then return nil end
  return cjson.decode(raw)
end

-- Sort node ids by their rank in the plan's topological order.
local function plan_sorted(ids)
  local rank = {}
  for _, n in ipairs(ids) do
    local a = adjacency(n)
    rank[n] = a and a.rank or 1e9
  end
  table.sort(ids, function(x, y) return rank[x] < rank[y] end)
  return ids
end

-- Nodes that became ready but whose task was not sent yet, in plan order.
local function undispatched()
  return plan_sorted(redis.call('SDIFF', K_READY, K_DISPATCHED))
end

-- A node event from a JSON template (run id filled in), stamped with the time NOW.
local function node_event(template_json, node, event_type)
  local event = cjson.decode(template_json)
  local adj = adjacency(node)
  event.node_id, event.event_type, event.timestamp = node, event_type, tonumber(NOW)
  if adj then event.node_type, event.node_name = adj.type, adj.name end
  return cjson.encode(event)
end

-- The run ends now (not succeeded): nodes that never started become not_run, each with
-- a not_run event, in plan order.
local function close_unstarted(template_json)
  local states = redis.call('HGETALL', K_NODES)
  local unstarted = {}
  for i = 1, #states, 2 do
    if UNSTARTED[states[i + 1]] then table.insert(unstarted, states[i]) end
  end
  for _, n in ipairs(plan_sorted(unstarted)) do
    redis.call('HSET', K_NODES, n, 'not_run')
    append(node_event(template_json, n, 'not_run'))
  end
end

-- Nodes on every run's queue, for back-pressure (the sweeper re-counts it now and then).
-- It lives as long as an active run: gone when nothing is queued or nothing moves.
local function count_queued(delta)
  if delta == 0 then return end
  if redis.call('INCRBY', K_QUEUED, delta) <= 0 then
    redis.call('DEL', K_QUEUED)
  else
    redis.call('EXPIRE', K_QUEUED, ACTIVE_TTL)
  end
end

-- Take up to n nodes from the head of the run's queue; they are undispatched again until
-- claimed or sent (the caller runs them).
local function take_queued(n)
  if not n or n <= 0 then return {} end
  local popped = redis.call('LPOP', K_QUEUE, n)
  if not popped then return {} end
  for _, node in ipairs(popped) do redis.call('SREM', K_DISPATCHED, node) end
  count_queued(-#popped)
  return popped
end

-- The run ends: its queue goes (what it held will not run).
local function drop_queue()
  count_queued(-redis.call('LLEN', K_QUEUE))
  redis.call('DEL', K_QUEUE)
end

-- What a completion returns: {queued, backlog, nodes to run now...}. With take == nil the
-- ready nodes are returned as they are; else they join the queue's tail (the queue answers
-- for them, so they count as dispatched) and the oldest `take` are taken from its head.
local function hand_over(ready, take)
  if take == nil then
    local out = {0, 0}
    for _, n in ipairs(ready) do table.insert(out, n) end
    return out
  end
  for _, n in ipairs(ready) do
    redis.call('RPUSH', K_QUEUE, n)
    redis.call('SADD', K_DISPATCHED, n)
  end
  count_queued(#ready)
  local out = {#ready, 0}
  for _, n in ipairs(take_queued(take)) do table.insert(out, n) end
  out[2] = redis.call('LLEN', K_QUEUE)
  return out
end
