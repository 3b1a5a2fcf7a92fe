-- Shared by every script (orchestrator/store/scripts.py prepends it). Keys and the first ARGVs have
-- one fixed layout so each script reads the run's keys by name:
--   KEYS[1..15]  the run's keys (Keys.run_keys order, ending adj, suspend, resume, queue, sent)
--   KEYS[16]     {p}:runs:active          KEYS[17]  {p}:runs:queued
--   KEYS[18]     the node's lease key (if any)
--   ARGV[1] events maxlen   ARGV[2] notify channel   ARGV[3] active TTL s
--   ARGV[4] retention TTL s ARGV[5] the wake-up's publish command (SPUBLISH on a cluster)   ARGV[6..] script-specific
local K_RUN, K_PLAN, K_NODES, K_PENDING, K_LIVE, K_OUT, K_CLAIMS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local K_READY, K_DISPATCHED, K_EVENTS, K_ADJ, K_SUSPEND, K_RESUME = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local K_QUEUE, K_SENT = KEYS[14], KEYS[15]
-- The run record's fields most calls need, in one read: the shared plan data's key, the
-- status, the bytes stored (storage budgets) and when the keys' TTL is due for renewal.
-- A run of a stored graph's version reads its adjacency and initial pending counts from
-- the plan data that version's runs share in its bucket (same slot; create.lua), named
-- by its record; other runs from their own KEYS[11].
local head = redis.call('HMGET', K_RUN, 'shared', 'status', 'bytes', 'renew_at')
K_ADJ = head[1] or K_ADJ
-- The rest as this call found them (status nil: no run), kept current by its own writes
-- (set_run_status, charge_budget, refresh_active_ttl): read once, whichever helpers ask.
local RUN = {status = head[2] or nil, bytes = tonumber(head[3] or '0'), renew_at = tonumber(head[4])}
local K_ACTIVE, K_QUEUED, K_LEASE = KEYS[16], KEYS[17], KEYS[18]
local RUN_KEY_COUNT = 15
local MAXLEN, CHANNEL, ACTIVE_TTL, RETENTION = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local PUBLISH = (ARGV[5] == 'SPUBLISH') and 'SPUBLISH' or 'PUBLISH'

-- A whole number as a command argument's text. Lua numbers given to redis.call are written
-- with "%.17g" (Redis 6.2; a float formatter, a few percent of a completion's time); '%d'
-- takes the integer path.
local function int(n)
  return string.format('%d', n)
end

-- One clock for every host: Redis's. Deadlines, retry due times, sent times, event
-- timestamps and finished_at all come from here, never from the caller, whose clock may
-- be off by seconds or minutes. NOW is epoch seconds as text (microseconds), NOW_S a number.
local CLOCK = redis.call('TIME')
local NOW = CLOCK[1] .. '.' .. string.format('%06d', tonumber(CLOCK[2]))
local NOW_S = tonumber(NOW)

-- The run's status changes (with `...`, more field/value pairs for its record).
local function set_run_status(status, ...)
  redis.call('HSET', K_RUN, 'status', status, ...)
  RUN.status = status
end

local ACTIVE = {queued = true, running = true, waiting = true}
local FINISHED = {succeeded = true, failed = true, skipped = true, not_run = true, cancelled = true}
local UNSTARTED = {pending = true, retrying = true, waiting = true}

-- An event JSON from workers/store.py starts {"timestamp":<number>,...}: give it the time
-- NOW without decoding it (decoding and encoding a large completed event would cost its
-- parse and could change the numbers in its outputs).
local function stamped(event_json)
  local head = '{"timestamp":'
  local comma = string.find(event_json, ',', #head + 1, true)
  if string.sub(event_json, 1, #head) ~= head or not comma then return event_json end
  return head .. NOW .. string.sub(event_json, comma)
end

-- Append one event (already JSON). Subscribers get one wake-up hint per call, not per
-- event: `settled(reply)`, which every script returns through, publishes WAKE, the last
-- event's id (pub/sub is only a hint: subscribers read every event after their last from
-- the stream).
local WAKE = ''
local function append(event_json)
  WAKE = redis.call('XADD', K_EVENTS, 'MAXLEN', '~', MAXLEN, '*', 'e', event_json)
  return WAKE
end

-- Every run key gets the same TTL: active while the run runs, retention once it ended.
-- absent (optional): KEYS indices the caller knows do not exist (create.lua).
local function expire_all(ttl_s, absent)
  for i = 1, RUN_KEY_COUNT do
    if not (absent and absent[i]) then redis.call('EXPIRE', KEYS[i], ttl_s) end
  end
  -- Shared plan data is never shortened, so it outlives every run naming it (EXPIRE GT,
  -- which the embedded Redis 6.2 lacks).
  if K_ADJ ~= KEYS[11] and redis.call('PTTL', K_ADJ) < tonumber(ttl_s) * 1000 then
    redis.call('EXPIRE', K_ADJ, ttl_s)
  end
end

-- An active run's keys get ACTIVE_TTL at create (the hashes its nodes fill exist from
-- then on); progress renews it only once half of it has passed, when the record's
-- renew_at (RUN.renew_at) is due: no EXPIRE of every key, nor a TTL read, per
-- completion. The run's end sets RETENTION on all of them.
local function renew_at()
  return string.format('%.6f', NOW_S + tonumber(ACTIVE_TTL) / 2)
end
local function refresh_active_ttl()
  if RUN.renew_at then
    if NOW_S < RUN.renew_at then return end
  elseif redis.call('TTL', K_RUN) >= tonumber(ACTIVE_TTL) / 2 then  -- a run an older release created
    return
  end
  expire_all(ACTIVE_TTL)
  local at = renew_at()
  redis.call('HSET', K_RUN, 'renew_at', at)
  RUN.renew_at = tonumber(at)
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

-- A flow in-edge of `node` resolved: how many remain. A shared plan's run counts arrivals
-- down from 0 in its pending hash and adds the initial count: `initial`, the edge's copy
-- of it (the fifth item of an adjacency's out edge), else the ':pending:<node>' field of
-- plan data an older release wrote (format 2).
local function arrive(node, initial)
  local left = redis.call('HINCRBY', K_PENDING, node, '-1')
  if K_ADJ == KEYS[11] then return left end
  return left + (initial or tonumber(redis.call('HGET', K_ADJ, ':pending:' .. node) or '0'))
end

-- A node's adjacency, read and decoded once per script call (a fan-out's completion sorts
-- the nodes it visited; the tables are never changed). Its field holds two JSON texts on
-- two lines (store/creation.py adjacency_fields): the countdown's data, decoded here, and
-- the node's claim data, kept as text until `claim_data` asks for it.
local ADJACENCY, CLAIM_DATA = {}, {}
local function adjacency(node)
  local known = ADJACENCY[node]
  if known == nil then
    local raw = redis.call('HGET', K_ADJ, node)
    known = false
    if raw then
      local cut = string.find(raw, '\n', 1, true)
      known = cjson.decode(cut and string.sub(raw, 1, cut - 1) or raw)
      CLAIM_DATA[node] = cut and string.sub(raw, cut + 1) or false
    end
    ADJACENCY[node] = known
  end
  return known or nil
end

-- A node's claim data ({ids, read}), or nil (not a node of the plan, or plan data an older
-- release wrote, without it).
local function claim_data(node)
  if not adjacency(node) then return nil end
  local data = CLAIM_DATA[node]
  if type(data) == 'string' then
    data = cjson.decode(data)
    CLAIM_DATA[node] = data
  end
  return data or nil
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

-- One command for a whole list (in slices: Lua's stack bounds how many arguments unpack passes).
local function variadic(command, key, items)
  for i = 1, #items, 4000 do
    redis.call(command, key, unpack(items, i, math.min(i + 3999, #items)))
  end
end

-- Nodes on every run's queue, for back-pressure (the sweeper re-counts it now and then).
-- It lives as long as an active run: gone when nothing is queued or nothing moves. The
-- call's changes are summed and written once, by `settled`.
local QUEUED_DELTA = 0
local function count_queued(delta)
  QUEUED_DELTA = QUEUED_DELTA + delta
end

-- Nodes taken from the run's queue in this call (in order), and which of them are not
-- claimed in it yet (node -> true). Such a node is undispatched again (until claimed or sent), but
-- its dispatched mark is dropped only when that is still so at the call's end, or before
-- anything reads the marks (`undispatched`): a node claimed in the same call keeps its mark,
-- without the SREM and the claim's SADD.
local UNQUEUED, UNCLAIMED = {}, {}
local function drop_unqueued_marks()
  local left = {}
  for _, n in ipairs(UNQUEUED) do
    if UNCLAIMED[n] then table.insert(left, n) end
  end
  variadic('SREM', K_DISPATCHED, left)
  UNQUEUED, UNCLAIMED = {}, {}
end

-- Nodes that became ready but whose task was not sent yet, in plan order.
local function undispatched()
  drop_unqueued_marks()
  return plan_sorted(redis.call('SDIFF', K_READY, K_DISPATCHED))
end

-- A node event from a JSON template (run id filled in), stamped with the time NOW.
local function node_event(template_json, node, event_type, data)
  local event = cjson.decode(template_json)
  local adj = adjacency(node)
  event.node_id, event.event_type, event.timestamp = node, event_type, NOW_S
  if data then event.data = data end
  if adj then event.node_type, event.node_name = adj.type, adj.name end
  return cjson.encode(event)
end

-- The run ends now with run_status (not succeeded): nodes that never started become
-- not_run, nodes still running become cancelled (their worker's later completion changes
-- nothing), each with its event, in plan order.
local function close_open_nodes(template_json, run_status)
  local raw, states = redis.call('HGETALL', K_NODES), {}
  for i = 1, #raw, 2 do states[raw[i]] = raw[i + 1] end
  local open, was = {}, {}
  for _, n in ipairs(redis.call('HKEYS', K_ADJ)) do  -- every node (and the shared data's ':' fields)
    local status = states[n] or 'pending'  -- a node without a status is pending (create.lua)
    if string.sub(n, 1, 1) ~= ':' and (UNSTARTED[status] or status == 'running') then
      table.insert(open, n)
      was[n] = status
    end
  end
  for _, n in ipairs(plan_sorted(open)) do
    if was[n] == 'running' then
      redis.call('HSET', K_NODES, n, 'cancelled')
      append(node_event(template_json, n, 'cancelled', {reason = run_status}))
    else
      redis.call('HSET', K_NODES, n, 'not_run')
      append(node_event(template_json, n, 'not_run'))
    end
  end
end

-- Fencing: false while token (a claim's, as text or number) is the node's latest claim;
-- true, and counted in the run's `:stale` tally, when a later claim superseded it.
local function superseded(node, token)
  if tostring(redis.call('HGET', K_CLAIMS, 'token:' .. node)) == tostring(token) then return false end
  redis.call('HINCRBY', K_CLAIMS, ':stale', '1')  -- ':' begins no node id
  return true
end

-- Take up to n nodes from the head of the run's queue; they are undispatched again until
-- claimed or sent (the caller runs them).
local function take_queued(n)
  if not n or n <= 0 then return {} end
  local popped = redis.call('LPOP', K_QUEUE, int(n))
  if not popped then return {} end
  for _, node in ipairs(popped) do
    table.insert(UNQUEUED, node)
    UNCLAIMED[node] = true
  end
  count_queued(-#popped)
  return popped
end

-- The run ends: its queue goes (what it held will not run).
local function drop_queue()
  count_queued(-redis.call('LLEN', K_QUEUE))
  redis.call('DEL', K_QUEUE)
end

-- Count a completion's bytes within the storage budgets (orchestrator/store/storage_budget.py):
-- nbytes within limits {ws_max, run_max, expire_at}, the workspace's day counters at
-- KEYS[first..last] (today's first). Returns nil when counted, else {'budget', 'run' |
-- 'workspace', used}: nothing counted. The counters are read once per call and the call's
-- bytes added to them once, by `settled`: a group of completions pays one MGET, one
-- HINCRBY and one INCRBY, not each of them.
local CHARGED, DAYS = 0, {}
local function charge_budget(nbytes, limits, first, last)
  local used = RUN.bytes
  if limits.run_max > 0 and used + nbytes > limits.run_max then return {'budget', 'run', used} end
  local day = DAYS[first]
  if not day then
    local total = 0
    for _, used_that_day in ipairs(redis.call('MGET', unpack(KEYS, first, last))) do
      total = total + tonumber(used_that_day or '0')
    end
    day = {key = KEYS[first], used = total, added = 0, expire_at = limits.expire_at}
    DAYS[first] = day
  end
  if limits.ws_max > 0 and day.used + nbytes > limits.ws_max then return {'budget', 'workspace', day.used} end
  RUN.bytes = used + nbytes
  CHARGED = CHARGED + nbytes
  day.used, day.added = day.used + nbytes, day.added + nbytes
  return nil
end

-- A run-level event from its JSON template, given the time NOW.
local function run_event(event_json)
  local event = cjson.decode(event_json)
  event.timestamp = tonumber(NOW)
  return cjson.encode(event)
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
  local direct = 0
  if #ready > 0 and redis.call('LLEN', K_QUEUE) == 0 then
    -- Nothing older waits: the first `take` ready nodes are the queue's head, taken at once
    -- (the same as pushing and popping them, without the commands).
    direct = math.max(0, math.min(take, #ready))
  end
  local out = {#ready, 0}
  for i = 1, direct do table.insert(out, ready[i]) end
  for i = direct + 1, #ready do
    redis.call('RPUSH', K_QUEUE, ready[i])
    redis.call('SADD', K_DISPATCHED, ready[i])
  end
  if #ready > direct then
    ensure_ttl(K_QUEUE)  -- the queue comes and goes as it empties
    count_queued(#ready - direct)
  end
  if direct == 0 then
    local popped = take_queued(take)
    for _, n in ipairs(popped) do table.insert(out, n) end
    -- fewer than asked for: the queue is empty now
    out[2] = (#popped < take) and 0 or redis.call('LLEN', K_QUEUE)
  else
    out[2] = #ready - direct  -- the queue was empty: what was pushed is all it holds
  end
  return out
end

-- May this worker run `node` now? Atomic lease (at lease_key, lease_ms) + claim count +
-- the `started` event (JSON text). claim.lua calls it for a node a task brought;
-- complete.lua for the successor the completing worker takes and runs next (one round
-- trip for both). Returns {kind, claims, pending_dispatch...} with kind
-- run|done|busy|closed, or {'early', claims, ms left} for a retry not due yet (nothing
-- changes unless kind is run); a granted claim returns {'run', claims, run_input JSON,
-- session_id, resume JSON or '', attempt, token, workspace, node, outputs JSON, ...}
-- with the stored outputs of the nodes in `read`. token is the claim's fencing token:
-- one more than the node's previous claim's. `known` (nil from claim.lua): what the
-- caller's script established before, in the same call, and need not be read again:
-- {active = the run is active, planned = the node is the plan's, status = the node's
-- status, or nil (read here), stamped = `started` carries the time NOW already, sent = the
-- texts replies before this one in the same list carry: the run's input (':input') and
-- read nodes' outputs, which this reply then gives as false)}.
local RUN_CONTEXT = nil  -- the run's input, session id and workspace, read once per call
-- Stored outputs this call wrote or read (node -> JSON text): a claim reads each once.
local OUTPUTS = {}
local function claim(node, lease_key, lease_ms, started, read, known)
  known = known or {}
  if not known.active and not (RUN.status and ACTIVE[RUN.status]) then
    return {'closed', 0}
  end
  if not known.planned and redis.call('HEXISTS', K_ADJ, node) == 0 then
    return {'closed', 0}
  end
  local node_status = known.status or redis.call('HGET', K_NODES, node)
  if FINISHED[node_status] then
    local out = {'done', tonumber(redis.call('HGET', K_CLAIMS, node) or '0')}
    for _, n in ipairs(undispatched()) do table.insert(out, n) end
    return out
  end
  -- A node the caller made ready in this call (`known.fresh`) was never claimed, sent or
  -- resumed: no lease, sent time or resume payload to look for.
  local fresh = known.fresh
  -- A live lease is busy whoever holds it (this worker too: a redelivered copy of a node it
  -- runs must not supersede the execution under way).
  if not fresh and redis.call('EXISTS', lease_key) == 1 then
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
  -- The node's fencing token, claim count and attempt in one read (none for a fresh node:
  -- never claimed nor retried); the first two counted up in one write.
  local counts = fresh and {} or redis.call('HMGET', K_CLAIMS, 'token:' .. node, node, 'attempt:' .. node)
  local token, claims = (tonumber(counts[1]) or 0) + 1, (tonumber(counts[2]) or 0) + 1
  local attempt = tonumber(counts[3] or '1')
  local token_text = int(token)
  redis.call('HSET', K_CLAIMS, 'token:' .. node, token_text, node, int(claims))
  redis.call('SET', lease_key, token_text, 'PX', int(lease_ms))
  -- A claimed node is dispatched by definition (a node run in-process is claimed without a
  -- task), and its message arrived: no longer one the sweeper may have to send again.
  if UNCLAIMED[node] then
    UNCLAIMED[node] = nil  -- taken from the queue in this call: still marked
  else
    redis.call('SADD', K_DISPATCHED, node)
  end
  if not fresh then redis.call('HDEL', K_SENT, node) end
  redis.call('HSET', K_NODES, node, 'running')
  local resume = nil
  if not fresh then resume = redis.call('HGET', K_RESUME, node) end
  if claims == 1 and attempt == 1 then
    append(known.stamped and started or stamped(started))
  else
    local event = cjson.decode(started)
    event.attempt, event.timestamp = attempt, NOW_S
    if node_status ~= 'retrying' and claims > 1 then
      -- the previous holder died (lease expired) or the task was redelivered: say so
      if type(event.data) ~= 'table' then event.data = {} end
      if resume then event.data.resumed = true else event.data.reclaimed = true end
    end
    append(cjson.encode(event))
  end
  RUN_CONTEXT = RUN_CONTEXT or redis.call('HMGET', K_RUN, 'run_input', 'session_id', 'workspace')
  local context = RUN_CONTEXT
  -- A text a reply of several claims (`known.sent`) carries already goes as false (nil):
  -- a fan-out's branches all read the run's input and their source's outputs, once each.
  local sent = known.sent
  local run_input = context[1] or 'null'
  if sent then
    if sent[':input'] then run_input = false else sent[':input'] = true end
  end
  local reply = {'run', claims, run_input, context[2] or '', resume or '', attempt, token, context[3] or ''}
  -- The outputs this call has not seen yet in one HMGET (in slices: Lua's stack bounds
  -- how many arguments unpack passes); a node without stored outputs is left out.
  local unseen = {}
  for _, n in ipairs(read) do
    if OUTPUTS[n] == nil then table.insert(unseen, n) end
  end
  for i = 1, #unseen, 4000 do
    local last = math.min(i + 3999, #unseen)
    local blobs = redis.call('HMGET', K_OUT, unpack(unseen, i, last))
    for k = i, last do OUTPUTS[unseen[k]] = blobs[k - i + 1] end
  end
  for _, n in ipairs(read) do
    if OUTPUTS[n] then
      table.insert(reply, n)
      if sent and sent[n] then
        table.insert(reply, false)
      else
        table.insert(reply, OUTPUTS[n])
        if sent then sent[n] = true end
      end
    end
  end
  return reply
end

-- Claim, in this call, the nodes a caller takes (nodes[from..]), as claim.lua would, each
-- with the request `taken` ({lease_ms, lease: the lease key without the node id (the run's
-- hash tag), head, tail: the started event's JSON before and after the node's ids}) and
-- the node's `claim_data` (its ids in the started event, what its step reads) describe; a
-- node without it is not claimed.
-- The caller has found the run active in this call; `statuses` (or nil): the nodes whose
-- status it read in this call, and nothing changed since (a node it made ready in this
-- call, and only such a node: pending).
-- Returns {node, claim reply, ...} of the granted claims, each text in them once (the run's
-- input, each read node's outputs: later replies give false, scripts.py claims_from); a
-- claim not granted is not returned: the caller's own claim call then gets the same answer.
local function claim_nodes(nodes, from, taken, statuses)
  -- the texts the granted claims' replies carry (see `claim`), when there may be several
  local granted, sent = {}, (#nodes > from) and {} or nil
  local head = stamped(taken.head)  -- the started events' time, stamped once for all of them
  for j = from, #nodes do
    local n, reply = nodes[j], nil
    local data = claim_data(n)
    if data then  -- a node of the plan (only those have claim data)
      local status = statuses and statuses[n]
      reply = claim(n, taken.lease .. n, taken.lease_ms, head .. data.ids .. taken.tail, data.read,
                    {active = true, planned = true, status = status, stamped = true, fresh = status == 'pending',
                     sent = sent})
    end
    if reply and reply[1] == 'run' then
      table.insert(granted, n)
      table.insert(granted, reply)
    end
  end
  return granted
end

-- Every script returns through here: it writes what the call kept for its end (the bytes
-- its completions stored, within the storage budgets' counters; the change to the queued
-- count; the dispatched marks of nodes taken from the queue and not claimed) and publishes
-- one wake-up hint for the events it appended. A Lua script runs alone, so no other client
-- sees the counts before they are written.
local function settled(reply)
  if CHARGED > 0 then redis.call('HINCRBY', K_RUN, 'bytes', int(CHARGED)) end
  for _, day in pairs(DAYS) do
    -- today's counter gets its expiry when this call created it (only these scripts and
    -- store/storage_budget.py write it, each with its expiry)
    if day.added > 0 and redis.call('INCRBY', day.key, int(day.added)) == day.added then
      redis.call('EXPIREAT', day.key, int(day.expire_at))
    end
  end
  CHARGED, DAYS = 0, {}
  drop_unqueued_marks()
  if QUEUED_DELTA ~= 0 then
    if redis.call('INCRBY', K_QUEUED, int(QUEUED_DELTA)) <= 0 then
      redis.call('DEL', K_QUEUED)
    else
      redis.call('EXPIRE', K_QUEUED, ACTIVE_TTL)
    end
    QUEUED_DELTA = 0
  end
  if WAKE ~= '' then
    redis.call(PUBLISH, CHANNEL, WAKE)
    WAKE = ''
  end
  return reply
end
