-- Append one event to an existing run's log. ARGV[6] event JSON, ARGV[7] node id and
-- ARGV[8] fencing token ('' for none: run-level events, hosts). Returns the id or ''.
-- With a token the event is refused ('') unless the token is the node's latest claim
-- (a superseded one is counted) and the node still runs (one cancelled with its run is over).
if redis.call('EXISTS', K_RUN) == 0 then
  return ''
end
if ARGV[8] ~= '' then
  if superseded(ARGV[7], ARGV[8]) or redis.call('HGET', K_NODES, ARGV[7]) ~= 'running' then
    return ''
  end
end
return woken(append(stamped(ARGV[6])))  -- the stream exists since create_run (and has its TTL)
