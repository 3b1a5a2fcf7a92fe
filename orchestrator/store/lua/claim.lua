-- May this worker run the node now? See `claim` in the prelude (shared with complete.lua,
-- which claims the successor its worker runs next in the same call).
-- ARGV[6] one JSON object: {node, lease_ms, started (the event JSON, a string),
--   read: [node ids whose stored outputs the step reads (its flow sources and the nodes
--   its expressions name), returned with a granted claim to save a round trip]}
local args = cjson.decode(ARGV[6])
return settled(claim(args.node, K_LEASE, args.lease_ms, args.started, args.read))
