-- cancel: a pending or scheduled job ends cancelled at once and never runs; a
-- running one is flagged, and its handler sees the flag at its next check.
-- A job cancelled here appends the archive's event (includes/archive.lua);
-- a flagged one does when it ends.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] schedule emq:{q}:schedule
-- ARGV[1] job_id
-- ARGV[2] keep_ms  how long the cancelled row is kept (PEXPIRE), 1..2^53
-- Returns: 1 cancelled, 2 running and flagged (cancel_requested = 1),
--          0 already finished (done, dead or cancelled; nothing changes).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQNOJOB no such row; EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include lanes
-- @include base
-- @include archive
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'pending'},
  {KEYS[3], 'schedule'}})
if bad_key then return bad_key end
local keep_ms, bad_arg = int_arg(ARGV[2], 'keep_ms', 1, MAX_MS)
if bad_arg then return bad_arg end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return redis.error_reply('EMQNOJOB no job ' .. ARGV[1])
end
if state == 'active' then
  redis.call('HSET', KEYS[1], 'cancel_requested', '1')
  return 2
end
if state ~= 'pending' and state ~= 'scheduled' then
  return 0
end
if state == 'pending' then
  lane_drop(queue_root(KEYS[2]), lane_of(KEYS[1]), ARGV[1])
end
redis.call('ZREM', KEYS[3], ARGV[1])
local now = now_ms()
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished_at_ms', now)
redis.call('PEXPIRE', KEYS[1], keep_ms)
archive_end(KEYS[1], 'cancelled', now)
return 1
