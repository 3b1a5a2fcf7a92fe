-- Append one event to an existing run's log. ARGV[6] event JSON. Returns the id or ''.
if redis.call('EXISTS', K_RUN) == 0 then
  return ''
end
local id = append(ARGV[6])
ensure_ttl(K_EVENTS)
return id
