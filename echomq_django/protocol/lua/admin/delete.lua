-- admin/delete: remove a job that is not running: its row and its member in
-- pending, schedule and dead.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] pending  emq:{q}:pending (its root names the job's lane)
-- KEYS[3] schedule emq:{q}:schedule
-- KEYS[4] dead     emq:{q}:dead
-- ARGV[1] job_id
-- Returns: 1 deleted; 0 nothing found (nothing changes);
--          2 the job is running (state active; nothing changes: cancel it).
-- Errors: EMQARG a malformed argument (nothing changes).
-- @include args
-- @include lanes
local _, bad_row = row_arg(KEYS[1], ARGV[1], KEYS[2])
if bad_row then return bad_row end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'active' then
  return 2
end
local found = 0
if state == 'pending' and lane_drop(queue_root(KEYS[2]), lane_of(KEYS[1]), ARGV[1]) then
  found = 1
end
found = found + redis.call('ZREM', KEYS[3], ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1])
  + redis.call('DEL', KEYS[1])
if found > 0 then
  return 1
end
return 0
