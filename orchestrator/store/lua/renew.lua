-- Extend the leases of the claims a worker still runs (no prelude: KEYS are its own).
-- KEYS[1] the run's claims hash   KEYS[1 + i] node i's lease key
-- ARGV[1] lease ms   ARGV[2i] node i's id   ARGV[2i + 1] the fencing token of its claim
-- A lease is (re)set while its token is the node's latest claim: one that lapsed (the
-- worker was cut off a while) is taken again when nobody claimed the node since.
-- Returns the ids of the nodes whose token a later claim superseded (counted in `:stale`).
local superseded = {}
for i = 2, #KEYS do
  local node, token = ARGV[2 * (i - 1)], ARGV[2 * (i - 1) + 1]
  if redis.call('HGET', KEYS[1], 'token:' .. node) == token then
    redis.call('SET', KEYS[i], token, 'PX', ARGV[1])
  else
    redis.call('HINCRBY', KEYS[1], ':stale', 1)
    table.insert(superseded, node)
  end
end
return superseded
