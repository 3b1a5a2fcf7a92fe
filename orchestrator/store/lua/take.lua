-- Take up to ARGV[6] nodes from the head of the run's queue (none once the run ended);
-- they are undispatched again until claimed or sent. Returns their ids, oldest first.
local status = redis.call('HGET', K_RUN, 'status')
if not status or not ACTIVE[status] then
  return {}
end
return take_queued(tonumber(ARGV[6]))
