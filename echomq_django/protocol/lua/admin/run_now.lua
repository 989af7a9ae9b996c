-- admin/run_now: release one scheduled job to pending now, as promote does
-- when its run-at comes; the row's run_at_ms becomes the server's now.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] schedule emq:{q}:schedule
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] wake_cap most wake markers kept, 1..10000
-- Returns: 1 moved to pending; 0 not in schedule (nothing changes);
--          2 in schedule without a scheduled row (it expired, or the id was
--          enqueued again: the member is dropped, as promote does).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include rejoin
-- @include take
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'schedule'},
  {KEYS[3], 'pending'}, {KEYS[4], 'wake'}})
if bad_key then return bad_key end
local wake_cap, bad_arg = int_arg(ARGV[2], 'wake_cap', 1, 10000)
if bad_arg then return bad_arg end
local taken = take(KEYS[2], KEYS[1], ARGV[1], 'scheduled')
if taken ~= 1 then return taken end
rejoin(KEYS[1], KEYS[3], ARGV[1])
-- Its run-at is now, not the instant it was scheduled for: the row says so.
redis.call('HSET', KEYS[1], 'run_at_ms', now_ms())
signal(KEYS[4], 1, wake_cap)
return 1
