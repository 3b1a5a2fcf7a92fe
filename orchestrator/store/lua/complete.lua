-- Apply independent completions of one run's nodes in one call, each exactly once: the
-- same state changes, events and replies as one call per completion in this order
-- (`complete` in completion.lua, which says what each takes and returns). A process
-- sends the completions its loop made together as one call (a group commit,
-- RedisRunStore._send_completions): a script call's fixed cost, most of a fan-out
-- branch's Redis time, is paid once for them all.
-- ARGV[6] a JSON array, one object per completion: complete's named fields, plus `budget`
--   (its reservation JSON, or ''), `lease` (its node's lease key: the run's hash tag) and
--   `events` (how many event texts it has). `taken` true: the call's shared one.
-- ARGV[7] the `taken` JSON the completions share (one process's claims of one run: decoded
--   once, not once per completion), or ''.
-- ARGV[8..] each completion's texts in turn (`completion_texts` in completion.lua).
-- KEYS[18] the first completion's lease; KEYS[19..] the workspace's day counters, which
--   every reservation of the call names.
-- Returns `complete`'s reply for each completion, in order.
local items = cjson.decode(ARGV[6])
local shared = ARGV[7] ~= '' and cjson.decode(ARGV[7]) or nil
local at, replies = 8, {}
for i, item in ipairs(items) do
  if item.taken == true then item.taken = shared end
  at = completion_texts(item, at)
  replies[i] = complete(item, item.budget, item.lease)
end
return settled(replies)
