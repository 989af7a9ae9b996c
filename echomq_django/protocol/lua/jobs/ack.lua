-- ack: complete an active job; only the current fencing token may.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] result   JSON text of the return value ('' for none)
-- ARGV[4] keep_ms  how long the done row is kept (PEXPIRE), 1..2^53
-- ARGV[5] base     emq:{q}: (this minute's counter is base .. 'stats:done:' .. minute)
-- ARGV[6] stats_ttl_ms how long a per-minute counter lives, 1..2^53
-- Returns: {finish time ms, 'done'}, or {.., 'cancelled'} when a cancel was
--          requested while it ran (not counted as done). A repeat by the same
--          token (its first reply lost) answers {now, the recorded outcome}.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument, a result that is not JSON included
--         (nothing changes).
-- @include args
-- @include base
-- @include outcomes
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'active'},
  {KEYS[3], 'claims'}}, ARGV[5])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[4], 'keep_ms', 1, MAX_MS}, {ARGV[6], 'stats_ttl_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
if ARGV[3] ~= '' then
  local _, bad_result = json_arg(ARGV[3], 'result')
  if bad_result then return bad_result end
end
local err, at, state = finish_ack({active = KEYS[2], claims = KEYS[3]}, ARGV[5], ARGV[1],
  ARGV[2], ARGV[3], {keep_ms = n[1], stats_ttl_ms = n[2]})
if err then return err end
return {at, state}
