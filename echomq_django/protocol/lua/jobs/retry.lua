-- retry: re-park an active job on the schedule set at server now + delay_ms.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] schedule emq:{q}:schedule
-- KEYS[5] beat     emq:{q}:beat, wakes the metronome when the run-at is earlier than
--                  the instant it plans to wake at (includes/beat.lua)
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] delay_ms the backoff delay, computed above the wire, 0..2^53
-- ARGV[4] error    the failure's text (traceback), kept as last_error
-- ARGV[5] base     emq:{q}: (this minute's counter is base .. 'stats:failed:' .. minute)
-- ARGV[6] stats_ttl_ms how long a per-minute counter lives, 1..2^53
-- ARGV[7] keep_ms  how long a cancelled row is kept, 1..2^53
-- Returns: {run-at ms, 'scheduled'}, or {now, 'cancelled'} when a cancel was
--          requested while it ran (never retried). A repeat by the same token
--          answers {now, the recorded outcome}.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include base
-- @include outcomes
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'active'},
  {KEYS[3], 'claims'}, {KEYS[4], 'schedule'}, {KEYS[5], 'beat'}}, ARGV[5])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[3], 'delay_ms', 0, MAX_MS}, {ARGV[6], 'stats_ttl_ms', 1, MAX_MS},
  {ARGV[7], 'keep_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
local err, at, state = finish_retry({active = KEYS[2], claims = KEYS[3], schedule = KEYS[4],
  beat = KEYS[5]}, ARGV[5], ARGV[1], ARGV[2], n[1], ARGV[4], '',
  {keep_ms = n[3], stats_ttl_ms = n[2]})
if err then return err end
return {at, state}
