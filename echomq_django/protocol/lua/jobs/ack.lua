-- ack: complete an active job; only the current fencing token may.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] result   JSON text of the return value ('' for none)
-- ARGV[4] keep_ms  how long the done row is kept (PEXPIRE)
-- ARGV[5] base     emq:{q}: (this minute's counter is base .. 'stats:done:' .. minute)
-- ARGV[6] stats_ttl_ms how long a per-minute counter lives
-- Returns: {finish time ms, 'done'}, or {.., 'cancelled'} when a cancel was
--          requested while it ran (not counted as done).
-- Errors: EMQSTALE the token does not hold the lease (nothing changes);
--         EMQKEY the base root is not the queue root of KEYS[2].
-- @include now
-- @include fence
-- @include lease
-- @include base
-- @include stats
-- @include cancelled
-- @include settle
local bad = check_base(ARGV[5], KEYS[2])
if bad then return bad end
local err, now, cancelled = settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
if err then return err end
if cancelled then return {now, 'cancelled'} end
redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at_ms', now, 'result', ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
count(ARGV[5], 'done', now, tonumber(ARGV[6]))
return {now, 'done'}
