-- Apply the completions of a chain's links in one call: the first (run under its claim's
-- token), then each next one under the claim the previous completion made for it when it
-- handed it over: the same state changes and events, in the same order, as a completion
-- call per link (`complete` in completion.lua), but atomic and one round trip.
-- ARGV[6] a JSON array, one object per link: complete's named fields (the first's also
--   take, token and taken; the others use the first's take and taken, and are not fenced:
--   their claims are made here; the first's `bytes` are the whole chain's) and `events`
--   (how many event texts the link has).
-- ARGV[7..11] what the links share (`shared_texts` in completion.lua).
-- ARGV[12..] each link's texts in turn (`completion_texts` in completion.lua).
-- KEYS[18] the first link's lease; the others' are the shared lease prefix and their id.
-- Returns {applied, reply}: how many links were applied, and `complete`'s reply for the
-- last one applied (with applied 0, the first's refusal: 'stale' or 'budget'). A link is
-- applied only if the previous completion handed it over, alone, with a claim granted
-- here, and its own completion is not refused; else the chain stops there, and that
-- previous reply (which may hold the link's claim: its caller runs it as any node handed
-- over) is the answer.
local links = cjson.decode(ARGV[6])
local shared, at = shared_texts(7)
local first = links[1]
local function answer(applied, reply)
  return settled({applied, reply})  -- one wake-up hint for all the links' events
end

-- Whether `reply` handed over `node` and nothing else, with a claim granted for it.
local function handed_alone(reply, node)
  if reply[1] ~= 'claimed' or #reply ~= 5 or reply[5] ~= node then return false end
  local granted = reply[2]
  return #granted == 2 and granted[1] == node and granted[2][1] == 'run'
end

local reply = nil
for i, link in ipairs(links) do
  at = completion_texts(link, shared, at)
  local lease = K_LEASE
  if i > 1 then
    if not handed_alone(reply, link.node) then return answer(i - 1, reply) end
    -- its claim was granted above, in this call: no later one can have superseded it
    link.token, link.take, link.taken = nil, first.take, first.taken
    lease = shared.lease .. link.node
  end
  local this = complete(link, shared.limits, lease)
  if this[1] == 'stale' or this[1] == 'budget' then
    return answer(i - 1, i == 1 and this or reply)
  end
  reply = this
end
return answer(#links, reply)
