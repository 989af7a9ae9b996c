-- dead: end an active job as a dead letter, with its reason and last error.
-- KEYS[1] job         emq:{q}:job:<id>, the row
-- KEYS[2] active      emq:{q}:active
-- KEYS[3] dead        emq:{q}:dead (score = ms of death)
-- ARGV[1] job_id
-- ARGV[2] token       the token the claim returned
-- ARGV[3] reason      a short reason ('failed', 'unknown job', ...)
-- ARGV[4] error       the failure's text (traceback), kept as last_error
-- ARGV[5] base        emq:{q}: (rows of trimmed dead letters are deleted)
-- ARGV[6] dead_ttl_ms how long a dead letter is kept
-- ARGV[7] dead_max    most dead letters kept; the oldest go first
-- ARGV[8] stats_ttl_ms how long a per-minute counter lives ('failed' counts deaths)
-- ARGV[9] keep_ms     how long a cancelled row is kept
-- Returns: {time of death ms, 'dead'}, or {now, 'cancelled'} when a cancel
--          was requested while it ran.
-- Errors: EMQSTALE the token does not hold the lease (nothing changes);
--         EMQKEY the base root is not the prefix of KEYS[3].
-- @include now
-- @include fence
-- @include lease
-- @include base
-- @include stats
-- @include cancelled
-- @include settle
local bad = check_base(ARGV[5], KEYS[3])
if bad then return bad end
local err, now, cancelled = settle(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[9]))
if err then return err end
if cancelled then return {now, 'cancelled'} end
redis.call('HSET', KEYS[1], 'state', 'dead', 'reason', ARGV[3], 'last_error', ARGV[4],
  'finished_at_ms', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
redis.call('ZADD', KEYS[3], now, ARGV[1])
count(ARGV[5], 'failed', now, tonumber(ARGV[8]))
-- Retention, in bounded steps: drop letters older than the ttl (their rows
-- have expired on their own), then the oldest past the count limit.
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[6]))
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[7])
if excess > 0 then
  local old = redis.call('ZPOPMIN', KEYS[3], math.min(excess, 1000))
  for i = 1, #old, 2 do
    redis.call('DEL', ARGV[5] .. 'job:' .. old[i])
  end
end
return {now, 'dead'}
