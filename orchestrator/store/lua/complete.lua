-- Apply independent completions of one run's nodes in one call, each exactly once: the
-- same state changes, events and replies as one call per completion in this order
-- (`complete` in completion.lua, which says what each takes and returns). A process
-- sends the completions its loop made together as one call (a group commit,
-- RedisRunStore._send_completions): a script call's fixed cost, most of a fan-out
-- branch's Redis time, is paid once for them all, and what they share is sent once.
-- ARGV[6] a JSON array, one object per completion: complete's named fields, with `events`
--   (how many event texts it has). `taken` true: the call's shared one.
-- ARGV[7] the `taken` JSON the completions share (one process's claims of one run: decoded
--   once, not once per completion), or ''.
-- ARGV[8..12] what the completions share (`shared_texts` in completion.lua).
-- ARGV[13..] each completion's texts in turn (`completion_texts` in completion.lua).
-- KEYS[18] the first completion's lease; KEYS[19..] the workspace's day counters, which
--   the call's budget limits name.
-- Returns `complete`'s reply for each completion, in order.
local items = cjson.decode(ARGV[6])
local taken = ARGV[7] ~= '' and cjson.decode(ARGV[7]) or nil
local shared, at = shared_texts(8)
local replies = {}
for i, item in ipairs(items) do
  if item.taken == true then item.taken = taken end
  at = completion_texts(item, shared, at)
  replies[i] = complete(item, shared.limits, shared.lease .. item.node)
end
return settled(replies)
