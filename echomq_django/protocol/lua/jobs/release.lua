-- release: a shutting-down worker hands an unfinished job back to pending and
-- gives back the attempt it was on (the job did not fail). A job whose cancel
-- was requested while it ran ends cancelled instead of running again.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] wake_cap most wake markers kept
-- ARGV[4] keep_ms  how long a cancelled row is kept
-- Returns: 1 back to pending, 2 ended cancelled.
-- Errors: EMQSTALE the token does not hold the lease (nothing changes).
-- @include signal
-- @include fence
-- @include now
-- @include lease
-- @include cancelled
-- @include settle
-- @include rejoin
local err, _, cancelled = settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
if err then return err end
if cancelled then return 2 end
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
rejoin(KEYS[1], KEYS[3], ARGV[1])
signal(KEYS[4], 1, tonumber(ARGV[3]))
return 1
