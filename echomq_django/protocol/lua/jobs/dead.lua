-- dead: end an active job as a dead letter, with its reason and last error.
-- KEYS[1] job         emq:{q}:job:<id>, the row
-- KEYS[2] active      emq:{q}:active
-- KEYS[3] claims      emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] dead        emq:{q}:dead (score = ms of death)
-- ARGV[1] job_id
-- ARGV[2] token       the token the claim returned
-- ARGV[3] reason      a short reason ('failed', 'unknown job', ...), non-empty
-- ARGV[4] error       the failure's text (traceback), kept as last_error
-- ARGV[5] base        emq:{q}: (rows of trimmed dead letters are deleted)
-- ARGV[6] dead_ttl_ms how long a dead letter is kept, 1..2^53
-- ARGV[7] dead_max    most dead letters kept (the oldest go first), 1..2^53
-- ARGV[8] stats_ttl_ms how long a per-minute counter lives ('failed' counts deaths)
-- ARGV[9] keep_ms     how long a cancelled row is kept, 1..2^53
-- Returns: {time of death ms, 'dead'}, or {now, 'cancelled'} when a cancel
--          was requested while it ran. A repeat by the same token answers
--          {now, the recorded outcome}.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- Retention is bounded per call (includes/retention.lua, shared with reap).
-- @include args
-- @include base
-- @include outcomes
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'active'},
  {KEYS[3], 'claims'}, {KEYS[4], 'dead'}}, ARGV[5])
if bad_key then return bad_key end
local _, bad_reason = text_arg(ARGV[3], 'reason')
if bad_reason then return bad_reason end
local n, bad_arg = ints({{ARGV[6], 'dead_ttl_ms', 1, MAX_MS}, {ARGV[7], 'dead_max', 1, MAX_MS},
  {ARGV[8], 'stats_ttl_ms', 1, MAX_MS}, {ARGV[9], 'keep_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
local err, at, state = finish_dead({active = KEYS[2], claims = KEYS[3], dead = KEYS[4]},
  ARGV[5], ARGV[1], ARGV[2], ARGV[3], ARGV[4], '',
  {keep_ms = n[4], dead_ttl_ms = n[1], dead_max = n[2], stats_ttl_ms = n[3]})
if err then return err end
return {at, state}
