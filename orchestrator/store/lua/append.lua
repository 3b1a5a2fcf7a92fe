-- Append events to an existing run's log, in order. ARGV[6] node id, ARGV[7] fencing token
-- ('' for none: run-level events, hosts), ARGV[8..] the events' JSON (one or more: what a
-- node streamed while its previous call was in flight, kernel/streaming.py).
-- Returns their ids, or {} when nothing was appended.
-- With a token the events are refused ({}) unless the token is the node's latest claim
-- (a superseded one is counted) and the node still runs (one cancelled with its run is over).
if redis.call('EXISTS', K_RUN) == 0 then
  return {}
end
if ARGV[7] ~= '' then
  if superseded(ARGV[6], ARGV[7]) or redis.call('HGET', K_NODES, ARGV[6]) ~= 'running' then
    return {}
  end
end
local ids = {}
for i = 8, #ARGV do
  ids[#ids + 1] = append(stamped(ARGV[i]))  -- the stream exists since create_run (and has its TTL)
end
return settled(ids)
