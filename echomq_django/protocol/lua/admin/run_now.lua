-- admin_run_now: release one scheduled job to pending now, as promote does
-- when its run-at comes; the row's run_at_ms becomes the server's now.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] schedule emq:{q}:schedule
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] wake_cap most wake markers kept
-- Returns: 1 moved to pending; 0 not in schedule (nothing changes);
--          2 in schedule without a row (the member is dropped, as promote does).
-- @include now
-- @include signal
-- @include rejoin
-- @include take
local taken = take(KEYS[2], KEYS[1], ARGV[1])
if taken ~= 1 then return taken end
rejoin(KEYS[1], KEYS[3], ARGV[1])
-- Its run-at is now, not the instant it was scheduled for: the row says so.
redis.call('HSET', KEYS[1], 'run_at_ms', now_ms())
signal(KEYS[4], 1, tonumber(ARGV[2]))
return 1
