-- Lanes assigned to workspaces (orchestrator/store/lanes.py): assign or touch, one call.
-- KEYS[1] hash  workspace -> "<lanes>:<its lanes>", e.g. "8:3" or "8:1,4,6" (assigned among 8)
-- KEYS[2] zset  workspace -> when it last started a run (ms, Redis clock)
-- ARGV[1] JSON  {workspace, lanes, weight, hash, idle_ms}
-- Returns the workspace's lanes. Workspaces idle for idle_ms free theirs first; a workspace
-- keeps its lanes while they fit (assigned among as many lanes as now, min(weight, lanes) of
-- them), else it is given the least-loaded ones (load: the other workspaces assigned among as
-- many lanes on a lane), ties taken from its hash lane onward so workspaces spread, its
-- former lanes preferred among equals. A change of ORCH_LANES reassigns each workspace at its
-- next touch.
local a = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local idle = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - a.idle_ms, 'LIMIT', 0, 100)
for _, ws in ipairs(idle) do
  redis.call('HDEL', KEYS[1], ws)
  redis.call('ZREM', KEYS[2], ws)
end

local function parse(s)  -- "8:1,4" -> 8, {1, 4}
  local n, rest = string.match(s or '', '^(%d+):(.*)$')
  local out = {}
  for x in string.gmatch(rest or '', '%d+') do out[#out + 1] = tonumber(x) end
  return tonumber(n), out
end

local function keep(lanes)
  redis.call('ZADD', KEYS[2], now, a.workspace)
  for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], a.idle_ms * 2) end
  return lanes
end

local want = math.min(a.weight, a.lanes)
local among, held = parse(redis.call('HGET', KEYS[1], a.workspace))
if among == a.lanes and #held == want then return keep(held) end

local load = {}
for l = 0, a.lanes - 1 do load[l] = 0 end
for _, l in ipairs(held) do
  if l < a.lanes then load[l] = -0.5 end
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= a.workspace then
    local n, lanes = parse(all[i + 1])
    if n == a.lanes then
      for _, l in ipairs(lanes) do load[l] = load[l] + 1 end
    end
  end
end
local picked, taken = {}, {}
for _ = 1, want do
  local best
  for j = 0, a.lanes - 1 do
    local l = (a.hash + j) % a.lanes
    if not taken[l] and (best == nil or load[l] < load[best]) then best = l end
  end
  taken[best] = true
  picked[#picked + 1] = best
end
table.sort(picked)
redis.call('HSET', KEYS[1], a.workspace, a.lanes .. ':' .. table.concat(picked, ','))
return keep(picked)
