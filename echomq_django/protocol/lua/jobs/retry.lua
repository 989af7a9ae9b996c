-- retry: re-park an active job on the schedule set at server now + delay_ms.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] schedule emq:{q}:schedule
-- KEYS[4] beat     emq:{q}:beat, wakes the metronome
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] delay_ms the backoff delay, computed above the wire
-- ARGV[4] error    the failure's text (traceback), kept as last_error
-- ARGV[5] base     emq:{q}: (this minute's counter is base .. 'stats:failed:' .. minute)
-- ARGV[6] stats_ttl_ms how long a per-minute counter lives
-- ARGV[7] keep_ms  how long a cancelled row is kept
-- Returns: {run-at ms, 'scheduled'}, or {now, 'cancelled'} when a cancel was
--          requested while it ran (never retried).
-- Errors: EMQSTALE the token does not hold the lease (nothing changes);
--         EMQKEY the base root is not the queue root of KEYS[2].
-- @include now
-- @include signal
-- @include fence
-- @include lease
-- @include base
-- @include stats
-- @include cancelled
-- @include settle
local bad = check_base(ARGV[5], KEYS[2])
if bad then return bad end
local err, now, cancelled = settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[7]))
if err then return err end
if cancelled then return {now, 'cancelled'} end
local score = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'last_error', ARGV[4], 'failed_at_ms', now)
park(KEYS[1], KEYS[3], KEYS[4], ARGV[1], score)
count(ARGV[5], 'failed', now, tonumber(ARGV[6]))
return {score, 'scheduled'}
