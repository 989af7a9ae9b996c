-- admin/delete: remove a job that is not running: its row and its member in
-- pending, schedule and dead.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] pending  emq:{q}:pending (its root names the job's lane)
-- KEYS[3] schedule emq:{q}:schedule
-- KEYS[4] dead     emq:{q}:dead
-- ARGV[1] job_id
-- Returns: 1 deleted; 0 nothing found (nothing changes);
--          2 the job is running (state active; nothing changes: cancel it).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include lanes
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'pending'},
  {KEYS[3], 'schedule'}, {KEYS[4], 'dead'}})
if bad_key then return bad_key end
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
