-- Take up to ARGV[6] nodes from the head of the run's queue (none once the run ended);
-- they are undispatched again until claimed or sent. Returns their ids, oldest first.
-- ARGV[7] (optional) how to claim each node taken, in this call (complete.lua's `taken`,
-- see `claim_nodes` in the prelude): then returns {granted claims {node, reply, ...},
-- ids...}.
local taken = nil
if ARGV[7] and ARGV[7] ~= '' then taken = cjson.decode(ARGV[7]) end
local status = RUN.status
if not status or not ACTIVE[status] then
  if taken then return {{}} end
  return {}
end
local nodes = take_queued(tonumber(ARGV[6]))
if not taken then return settled(nodes) end
local reply = {claim_nodes(nodes, 1, taken, nil)}  -- the run is active (above)
for _, n in ipairs(nodes) do table.insert(reply, n) end
return settled(reply)
