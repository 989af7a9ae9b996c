-- release: a shutting-down worker hands an unfinished job back to pending and
-- gives back the attempt it was on (the job did not fail). A job whose cancel
-- was requested while it ran ends cancelled instead of running again.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] pending  emq:{q}:pending
-- KEYS[5] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] wake_cap most wake markers kept, 1..10000
-- ARGV[4] keep_ms  how long a cancelled row is kept, 1..2^53
-- Returns: 1 back to pending, 2 ended cancelled (a repeat by the same token
--          answers the same).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include signal
-- @include fence
-- @include now
-- @include lease
-- @include cancelled
-- @include settle
-- @include rejoin
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'active'},
  {KEYS[3], 'claims'}, {KEYS[4], 'pending'}, {KEYS[5], 'wake'}})
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[3], 'wake_cap', 1, 10000}, {ARGV[4], 'keep_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
local err, _, cancelled, replay = settle(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], n[2],
  'release')
if err then return err end
if replay then return replay == 'cancelled' and 2 or 1 end
if cancelled then return 2 end
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
rejoin(KEYS[1], KEYS[4], ARGV[1])
settled(KEYS[1], ARGV[2], 'release', 'pending')
signal(KEYS[5], 1, n[1])
return 1
