-- Included after the prelude by complete.lua and complete_chain.lua (store/scripts.py lua_source).
-- Apply one node's completion exactly once: the Lua twin of
-- orchestrator/kernel/scheduling.py:complete, plus storage, events and the run's end.
-- `args`, named fields (one object of the array in complete.lua's or complete_chain.lua's ARGV[6];
-- absent: null or false):
--   node, status (succeeded|failed|waiting|retrying),
--   live [ports], stop_run (bool), next_attempt (retrying),
--   retry_delay_s (retrying: the next attempt is due this long from NOW),
--   take (null, or how many queued nodes the caller takes: see hand_over in the prelude),
--   token (null, or the fencing token of the claim that ran the node),
--   bytes (absent, or what it stores, counted within the storage budgets: see `limits`),
--   taken (absent, or how every node handed over is claimed here as claim.lua would,
--   saving the caller that call: {lease_ms, lease (the lease key without the node id:
--   the run's hash tag), head, tail (the started event's JSON before and after the node's
--   ids)}; see `claimed` below)
-- What a call's completions share (`shared_texts`): run_id, lease (the lease keys without
--   the node id), limits (the storage budgets: {ws_max, run_max, expire_at}, with
--   KEYS[19..] the workspace's day counters (today's first); nil for none: the bytes are
--   counted here, in the script that stores them, orchestrator/store/storage_budget.py),
--   run_completed and node_template (JSON texts: the run's completed event, and the node
--   event template of skipped and not_run events, stamped NOW).
-- args.outputs, payload, error, run_failed, run_waiting: JSON texts the script stores or
--   appends as they are (each its own script argument, not inside the named fields' JSON,
--   so that neither side encodes or decodes them twice): outputs ({port: DataValue}),
--   payload (the suspend payload, or ''), error (or ''), run_failed / run_waiting (event
--   JSON; '' when not needed; run-level events get the time NOW); args.events the
--   completion's own events, in order.
-- `lease_key` the node's lease key (released).
-- Returns {queued, backlog, nodes...}: with take null the nodes that became ready and are
-- not yet dispatched, in plan order; with take, the oldest of the run's queue.
-- Returns {'claimed', {node, claim reply (see `claim` in the prelude), ...}, queued,
-- backlog, nodes...} when `taken` claimed some of those nodes (the claims granted).
-- Returns {'stale', 0} when a later claim superseded token: nothing applied, counted.
-- Returns {'budget', 'run' | 'workspace', used} when the bytes would pass that budget:
-- nothing applied (the caller stores the node's failure naming it instead).
local BUDGET_KEY = 19

-- What a call's completions share, from ARGV[at] on (RedisRunStore._shared_texts): run id,
-- lease keys' prefix, budget limits JSON (or ''), run_completed, node_template. Returns
-- them and the `at` of the first completion's texts.
local function shared_texts(at)
  local limits = ARGV[at + 2] ~= '' and cjson.decode(ARGV[at + 2]) or nil
  return {run_id = ARGV[at], lease = ARGV[at + 1], limits = limits, run_completed = ARGV[at + 3],
          node_template = ARGV[at + 4]}, at + 5
end

-- A completion's texts, from ARGV[at] on, into `args` (whose `events` says how many event
-- texts it has), with what it shares with the call's others: outputs, payload, error,
-- run_failed, run_waiting, then its events (scripts.py COMPLETE_TEXTS). Returns the next
-- one's `at`.
local function completion_texts(args, shared, at)
  args.outputs, args.payload, args.error = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  args.run_failed, args.run_waiting = ARGV[at + 3], ARGV[at + 4]
  args.run_id, args.run_completed, args.node_template = shared.run_id, shared.run_completed, shared.node_template
  at = at + 5
  local events = {}
  for j = 1, args.events do events[j] = ARGV[at + j - 1] end
  args.events = events
  return at + #events
end

local NOTHING = {0, 0}
local function complete(args, limits, lease_key)
  local node, status = args.node, args.status
  local take = args.take
  if take == cjson.null then take = nil end
  local run_status = RUN.status
  if not run_status then
    return NOTHING
  end
  -- Fencing: the completion of an execution a later claim superseded changes nothing.
  if args.token ~= nil and args.token ~= cjson.null and superseded(node, args.token) then
    return {'stale', 0}
  end
  local node_status = redis.call('HGET', K_NODES, node)

  local function append_own_events()
    for _, event_json in ipairs(args.events) do append(stamped(event_json)) end
  end

  -- A run that already ended (cancelled, failed, timed out) records the node but
  -- propagates and dispatches nothing (finish.lua already marked what did not run not_run).
  local terminal = not ACTIVE[run_status]

  -- Idempotency: a redelivered completion changes nothing.
  if FINISHED[node_status] then
    if terminal then return NOTHING end
    return hand_over(undispatched(), nil)
  end
  if status == 'waiting' and (node_status == 'waiting' or terminal) then
    return NOTHING
  end

  local bytes = args.bytes
  if bytes ~= nil and bytes ~= cjson.null and limits then
    local refused = charge_budget(bytes, limits, BUDGET_KEY, #KEYS)
    if refused then return refused end
  end

  -- The nodes handed over (a chain's next link, a fan-out's branches, older nodes taken from
  -- the queue), claimed now with `taken` (`claim_nodes` in the prelude).
  local taken = args.taken
  if taken == cjson.null then taken = nil end
  -- The nodes this completion made ready, pending until their claim (what claim_nodes need
  -- not read again); the run is active wherever `claimed` is called.
  local made_ready = {}
  local function claimed(handed)
    if not taken then return handed end
    local granted = claim_nodes(handed, 3, taken, made_ready)
    if #granted == 0 then return handed end
    local reply = {'claimed', granted}
    for _, v in ipairs(handed) do table.insert(reply, v) end
    return reply
  end

  -- A failed attempt whose retry is scheduled: no worker holds the node until the next
  -- claim, which runs attempt next_attempt. Claims count worker losses, not attempts.
  if status == 'retrying' then
    if node_status ~= 'running' or terminal then return NOTHING end
    redis.call('HSET', K_NODES, node, 'retrying')
    redis.call('HSET', K_CLAIMS, 'attempt:' .. node, int(args.next_attempt))
    if args.retry_delay_s and args.retry_delay_s ~= cjson.null then
      redis.call('HSET', K_CLAIMS, 'retry_at:' .. node, string.format('%.6f', NOW_S + args.retry_delay_s))
    end
    redis.call('HINCRBY', K_CLAIMS, node, '-1')
    append_own_events()
    redis.call('DEL', lease_key)
    refresh_active_ttl()
    return claimed(hand_over({}, take))  -- its slot is free: the caller may take queued nodes
  end

  -- Suspend: keep the payload, hold no worker, count nothing down.
  if status == 'waiting' then
    if args.payload ~= '' then
      redis.call('HSET', K_SUSPEND, node, args.payload)
      ensure_ttl(K_SUSPEND)
    end
    redis.call('HSET', K_NODES, node, 'waiting')
    set_run_status('waiting')
    append_own_events()
    append(run_event(args.run_waiting))
    redis.call('DEL', lease_key)
    refresh_active_ttl()
    return claimed(hand_over({}, take))
  end

  redis.call('HSET', K_OUT, node, args.outputs)
  OUTPUTS[node] = args.outputs  -- what a claim in this call reads
  redis.call('HSET', K_NODES, node, status)

  -- A failure that stops the run, or a completion after the run ended: no countdown.
  local stop = args.stop_run
  if terminal or stop then
    append_own_events()
    redis.call('DEL', lease_key)
    if stop and not terminal then
      close_open_nodes(args.node_template, 'failed')
      set_run_status('failed', 'finished_at', NOW)
      if args.error ~= '' then redis.call('HSET', K_RUN, 'error', args.error) end
      append(run_event(args.run_failed))
      redis.call('ZREM', K_ACTIVE, args.run_id)
      drop_queue()
    end
    expire_all(RETENTION)
    return NOTHING
  end

  local remaining = redis.call('HINCRBY', K_RUN, 'remaining', '-1')

  -- Live counts this call incremented ("target|port" -> the count after it): not read again.
  local counted = {}

  -- should_run: something arrived, and every required port with in-edges got a value.
  -- (create.lua writes a start node's effect instead, which kernel/scheduling.py
  -- start_effect works out with this countdown's Python twin, scheduling.complete.)
  local function live_count(field)
    return counted[field] or tonumber(redis.call('HGET', K_LIVE, field) or '0')
  end
  local function should_run(target, adj)
    local live, total = {}, 0
    for _, port in ipairs(adj.in_ports) do
      live[port] = live_count(target .. '|' .. port)
      total = total + live[port]
    end
    if total == 0 then return false end
    for _, port in ipairs(adj.required) do  -- each with in-edges, so read above
      if (live[port] or live_count(target .. '|' .. port)) <= 0 then
        return false
      end
    end
    return true
  end

  local ready, skipped = {}, {}
  local live_ports = {}
  for _, port in ipairs(args.live) do live_ports[port] = true end
  -- Breadth-first, like scheduling.complete: skipped nodes enqueue with no live port.
  local queue, head = {{node, live_ports}}, 1
  while queue[head] do
    local current, ports = queue[head][1], queue[head][2]
    head = head + 1
    for _, edge in ipairs(adjacency(current).out) do
      local target, source_handle, target_handle = edge[2], edge[3], edge[4]
      if ports[source_handle] then
        local field = target .. '|' .. target_handle
        counted[field] = redis.call('HINCRBY', K_LIVE, field, '1')
      end
      local pending = arrive(target, edge[5])
      if pending == 0 and (redis.call('HGET', K_NODES, target) or 'pending') == 'pending' then
        local adj = adjacency(target)
        if should_run(target, adj) then
          table.insert(ready, target)
          made_ready[target] = 'pending'
          redis.call('SADD', K_READY, target)
        else
          redis.call('HSET', K_NODES, target, 'skipped')
          remaining = redis.call('HINCRBY', K_RUN, 'remaining', '-1')
          table.insert(skipped, target)
          table.insert(queue, {target, {}})
        end
      end
    end
  end

  append_own_events()
  for _, target in ipairs(plan_sorted(skipped)) do
    append(node_event(args.node_template, target, 'skipped'))
  end
  redis.call('DEL', lease_key)

  if remaining <= 0 then
    set_run_status('succeeded', 'finished_at', NOW)
    append(run_event(args.run_completed))
    redis.call('ZREM', K_ACTIVE, args.run_id)
    drop_queue()
    expire_all(RETENTION)
    return NOTHING
  end

  -- Nodes made ready here were pending: none was sent, queued or claimed yet.
  local handed = hand_over(plan_sorted(ready), take)
  refresh_active_ttl()
  return claimed(handed)
end
