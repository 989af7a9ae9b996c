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
-- Retention is bounded per call: at most TRIM letters past their ttl and
-- TRIM past dead_max leave the set (each death trims again, so the set
-- converges); a trimmed letter's row is deleted only while it is still dead
-- (an expired id may have been enqueued again since).
-- @include args
-- @include now
-- @include fence
-- @include lease
-- @include base
-- @include stats
-- @include cancelled
-- @include settle
local TRIM = 100
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
local err, now, cancelled, replay = settle(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], n[4],
  'dead')
if err then return err end
if replay then return {now, replay} end
if cancelled then return {now, 'cancelled'} end
redis.call('HSET', KEYS[1], 'state', 'dead', 'reason', ARGV[3], 'last_error', ARGV[4],
  'finished_at_ms', now)
settled(KEYS[1], ARGV[2], 'dead', 'dead')
redis.call('PEXPIRE', KEYS[1], n[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
count(ARGV[5], 'failed', now, n[3])
local function drop(id)
  redis.call('ZREM', KEYS[4], id)
  local row = ARGV[5] .. 'job:' .. id
  if redis.call('HGET', row, 'state') == 'dead' then
    redis.call('DEL', row)
  end
end
local expired = redis.call('ZRANGE', KEYS[4], '-inf', string.format('(%d', now - n[1]),
  'BYSCORE', 'LIMIT', 0, TRIM)
for _, id in ipairs(expired) do
  drop(id)
end
local excess = redis.call('ZCARD', KEYS[4]) - n[2]
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, math.min(excess, TRIM) - 1)) do
    drop(id)
  end
end
return {now, 'dead'}
