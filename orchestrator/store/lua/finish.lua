-- Force a terminal status (cancel, timeout, sweeper) if the run is still active.
-- ARGV[6] status  ARGV[7] error JSON or ''  ARGV[8] run id  ARGV[9] event JSON
-- ARGV[10] node event JSON template (for the not_run and cancelled events)
-- Returns 1 when this call ended the run, 0 when it was already terminal or unknown.
local status = RUN.status
if not status then
  redis.call('ZREM', K_ACTIVE, ARGV[8])  -- an expired run must not haunt the sweeper
  expire_all(RETENTION)  -- nor leave a key behind that lost its TTL
  return 0
end
if not ACTIVE[status] then
  return 0
end
if ARGV[6] ~= 'succeeded' then close_open_nodes(ARGV[10], ARGV[6]) end
set_run_status(ARGV[6], 'finished_at', NOW)
if ARGV[7] ~= '' then
  redis.call('HSET', K_RUN, 'error', ARGV[7])
end
append(ARGV[9])
redis.call('ZREM', K_ACTIVE, ARGV[8])
drop_queue()
expire_all(RETENTION)
return settled(1)
