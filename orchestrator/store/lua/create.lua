-- Create a run once: record, plan, per-node state, start nodes ready and marked sent
-- (the caller sends them next; the sweeper sends again one not claimed in time), run_started.
-- ARGV[6] record fields JSON [field, string, ...]   ARGV[7] plan JSON
-- ARGV[8] pending JSON [node, int, ...]   ARGV[9] adjacency JSON [node, json string, ...]
-- ARGV[10] start ids JSON [..]
-- (flat field/value lists: each hash is filled by a few variadic commands, not one
-- command per node: the per-command cost was most of a 50-node start's Redis time)
-- No node status is written: a node without one is pending (the nodes hash holds only
-- the ':' placeholder until a node is claimed, skipped or ended).
-- ARGV[11] deadline_s (the run's deadline is NOW + deadline_s, by Redis's clock, as is
-- created_at)  ARGV[12] run id  ARGV[13] run_started event JSON
-- ARGV[14] the start guard JSON, or '' for none: {created_at, workspace, version, latest,
-- keep_s}, with KEYS[18] the stored graph's hash and KEYS[19] its run index. The run is
-- created only while the graph is the one the caller compiled (same creation time and
-- workspace; ``version`` still its latest when ``latest``, else not above it); then its id
-- joins the index (scored by Redis's clock, ids older than keep_s trimmed).
-- ARGV[15] '1': the run's plan data is shared (Keys.plan_data, the last key: adjacency,
-- ':plan'), ARGV[7] then holds only the run id, labels and that
-- key, and ARGV[8]/ARGV[9] are empty lists; ARGV[16] that data as one flat JSON list, or
-- '' when the caller saw the key exist (then -2 if it is gone: nothing stored, the caller
-- sends it). Each run's TTL change extends the key's (prelude expire_all): it outlives
-- every run naming it.
-- ARGV[17..] (absent: none) a start node's completion, stored with the run in the same call
-- (kernel/start.py). Its effect on the fresh run is the same for every run of the plan, so
-- the caller sends it worked out (kernel/scheduling.py start_effect, the Python twin of
-- complete.lua's countdown) and this script writes it: ARGV[17] {node, ready, skipped (node
-- lists, plan order), arrivals [node, n, ...] (flow in-edges resolved), live [node|port,
-- n, ...], remaining, finished, budget_keys (how many)}, ARGV[18] the storage budget
-- reservation JSON or '': {bytes, ws_max, run_max, expire_at} (prelude charge_budget; its
-- day counters are the budget_keys keys before the shared plan data's key), ARGV[19]
-- outputs JSON, ARGV[20] run_completed
-- template, ARGV[21] node template (skipped events), ARGV[22..] its events, in order.
-- Then the start node is not sent: the nodes it made ready are, marked ready and sent as
-- start nodes are; a run it finished ends succeeded here. Past a budget it is not applied.
-- Returns {1} when created, {2, nodes...} when created with the start node's completion
-- applied (the nodes it made ready; none when the run ended with it), {0} when the run
-- already existed (a second call is a no-op), {-1} when the guard refused, {-2} when the
-- shared plan data is missing (nothing stored).
-- The run keys no run has at its start, for expire_all: suspend, resume, queue (the
-- scripts that create them give them the run's TTL, prelude ensure_ttl), the run's own
-- adjacency when it shares plan data, and the ready set when nothing is ready.
local function absent_at_start(ready)
  return {[8] = not ready, [11] = K_ADJ ~= KEYS[11], [12] = true, [13] = true, [14] = true}
end

if redis.call('EXISTS', K_RUN) == 1 then
  return {0}
end
local guard = nil
if ARGV[14] and ARGV[14] ~= '' then
  guard = cjson.decode(ARGV[14])
  local head = redis.call('HMGET', KEYS[18], 'latest', 'created_at', 'workspace')
  local latest = tonumber(head[1] or '0')
  if head[2] ~= guard.created_at or (head[3] or 'default') ~= guard.workspace
      or latest < guard.version or (guard.latest and latest ~= guard.version) then
    return {-1}
  end
end
local shared_new = false
if ARGV[15] == '1' then
  K_ADJ = KEYS[#KEYS]
  if redis.call('EXISTS', K_ADJ) == 0 then
    if ARGV[16] == '' then return {-2} end
    shared_new = true
  end
end
local completing = nil
if ARGV[17] and ARGV[17] ~= '' then
  completing = cjson.decode(ARGV[17])
  local last = #KEYS - ((ARGV[15] == '1') and 1 or 0)
  local budget = ARGV[18] ~= '' and cjson.decode(ARGV[18]) or nil
  if budget and charge_budget(budget.bytes, budget, last - completing.budget_keys + 1, last) then
    completing = nil  -- past a budget: the start node runs as a step, which reports it
  end
end
local deadline = string.format('%.6f', NOW_S + tonumber(ARGV[11]))
local fields = cjson.decode(ARGV[6])
for _, v in ipairs({'created_at', NOW, 'deadline', deadline, 'renew_at', renew_at()}) do
  fields[#fields + 1] = v
end
if completing then  -- a later field wins: the count after the start node
  fields[#fields + 1] = 'remaining'; fields[#fields + 1] = tostring(completing.remaining)
  if completing.finished then
    for _, v in ipairs({'status', 'succeeded', 'finished_at', NOW}) do fields[#fields + 1] = v end
  end
end
variadic('HSET', K_RUN, fields)
redis.call('SET', K_PLAN, ARGV[7])
-- The hashes and sets the nodes fill (and empty) exist from now on (':' begins no node id), so the TTL set
-- below covers them and no completion has to set it again (prelude refresh_active_ttl).
-- A start node completed here has its outputs, its status and its effect in the same commands.
local out, states, live = {':', ''}, {':', ''}, {':', '0'}
if completing then
  out[3], out[4] = completing.node, ARGV[19]
  states[3], states[4] = completing.node, 'succeeded'
  for _, n in ipairs(completing.skipped) do states[#states + 1] = n; states[#states + 1] = 'skipped' end
  for _, v in ipairs(completing.live) do live[#live + 1] = v end
end
redis.call('HSET', K_OUT, unpack(out))
variadic('HSET', K_NODES, states)
variadic('HSET', K_LIVE, live)
redis.call('HSET', K_CLAIMS, ':stale', 0)
redis.call('HSET', K_PENDING, ':', 0)  -- a shared plan's run counts its arrivals here (complete.lua)
local start = cjson.decode(ARGV[10])
if completing then start = completing.ready end  -- its successors are sent instead
local sent = {':', '0'}  -- ':' is no node: the sweeper sends nothing for it
for _, node in ipairs(start) do sent[#sent + 1] = node; sent[#sent + 1] = NOW end
variadic('HSET', K_SENT, sent)
local pending = cjson.decode(ARGV[8])
if #pending > 0 then variadic('HSET', K_PENDING, pending) end
if completing then
  local arrivals = completing.arrivals
  for i = 1, #arrivals, 2 do redis.call('HINCRBY', K_PENDING, arrivals[i], -arrivals[i + 1]) end
end
if shared_new then
  variadic('HSET', K_ADJ, cjson.decode(ARGV[16]))
elseif ARGV[15] ~= '1' then
  variadic('HSET', K_ADJ, cjson.decode(ARGV[9]))
end
if #start > 0 then variadic('SADD', K_READY, start) end
local marked = {':'}
for _, n in ipairs(start) do marked[#marked + 1] = n end
variadic('SADD', K_DISPATCHED, marked)
local finished = completing and completing.finished
if not finished then redis.call('ZADD', K_ACTIVE, deadline, ARGV[12]) end
append(stamped(ARGV[13]))
if guard then
  redis.call('ZADD', KEYS[19], NOW, ARGV[12])
  redis.call('ZREMRANGEBYSCORE', KEYS[19], '-inf', NOW_S - guard.keep_s)
end
if not completing then
  expire_all(ACTIVE_TTL, absent_at_start(#start > 0))
  return settled({1})
end
for i = 22, #ARGV do append(stamped(ARGV[i])) end
for _, n in ipairs(completing.skipped) do append(node_event(ARGV[21], n, 'skipped')) end
if finished then
  append(run_event(ARGV[20]))
  expire_all(RETENTION, absent_at_start(false))
else
  expire_all(ACTIVE_TTL, absent_at_start(#start > 0))
end
local reply = {2}
for _, n in ipairs(start) do reply[#reply + 1] = n end
return settled(reply)
