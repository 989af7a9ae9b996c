-- snooze: the seed's dynamic re-score (Jobs.delay): an active job goes back to
-- the schedule set at server now + delay_ms WITHOUT spending an attempt.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] schedule emq:{q}:schedule
-- KEYS[4] beat     emq:{q}:beat, wakes the metronome
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] delay_ms how long to sleep, ms
-- ARGV[4] keep_ms  how long a cancelled row is kept
-- Returns: {run-at ms, 'scheduled'}, or {now, 'cancelled'} when a cancel was
--          requested while it ran. attempts goes back down by one (the claim
--          that is given back), snoozes up by one.
-- Errors: EMQSTALE the token does not hold the lease (nothing changes).
-- @include now
-- @include signal
-- @include fence
-- @include lease
-- @include cancelled
-- @include settle
local err, now, cancelled = settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
if err then return err end
if cancelled then return {now, 'cancelled'} end
local score = now + tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
redis.call('HINCRBY', KEYS[1], 'snoozes', 1)
park(KEYS[1], KEYS[3], KEYS[4], ARGV[1], score)
return {score, 'scheduled'}
