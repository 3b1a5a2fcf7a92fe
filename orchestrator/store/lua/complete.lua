-- Apply one node's completion exactly once (`complete` in completion.lua, which says
-- what the arguments are and what it returns).
-- ARGV[6] the named fields (one JSON object); ARGV[7] the budget reservation JSON or '';
-- ARGV[8..14] the texts (outputs, payload, error, run_completed, run_failed, run_waiting,
-- node_template); ARGV[15..] the completion's own events.
local args = cjson.decode(ARGV[6])
args.outputs, args.payload, args.error = ARGV[8], ARGV[9], ARGV[10]
args.run_completed, args.run_failed, args.run_waiting, args.node_template = ARGV[11], ARGV[12], ARGV[13], ARGV[14]
args.events = {}
for i = 15, #ARGV do args.events[#args.events + 1] = ARGV[i] end
return woken(complete(args, ARGV[7], K_LEASE))
