-- take: take one token from a rate limiter's bucket, on the server clock
-- (docs/protocol.md, "limits/take"; seed 004's RateLimiter.take). The bucket holds
-- at most count tokens and refills count per per_ms.
-- KEYS[1] bucket   emq:{rl:<key>}, HASH: field 'bucket' = "<tokens>:<ms>"
-- ARGV[1] count    the most tokens the bucket holds (the burst), 1..2^53
-- ARGV[2] per_ms   the time count tokens take to refill, ms, 1..2^53
-- Returns: 0 when a token was taken (the key then expires after per_ms, when
--   a bucket left alone would be full again, as one never written is); else
--   the ms until the bucket holds a whole token (>= 1), and nothing changes.
-- Errors: EMQARG a malformed argument; EMQKEY a key that is not a rate
--   limiter's (nothing changes).
-- @include args
-- @include now
-- @include bucket
local n, bad = ints({{ARGV[1], 'count', 1, MAX_MS}, {ARGV[2], 'per_ms', 1, MAX_MS}})
if bad then return bad end
-- A limiter's key is its own hash tag: any other key (a job's row, say) is
-- refused rather than given a 'bucket' field.
if not string.find(KEYS[1], '^emq:{rl:[^{}%s]+}$') then
  return redis.error_reply('EMQKEY key ' .. KEYS[1] .. ' is not a rate limiter key '
    .. '(emq:{rl:<key>})')
end
local count, per_ms = n[1], n[2]
local now = now_ms()
local tokens = bucket_level(KEYS[1], 'bucket', count, per_ms, now)
if tokens < 1 then
  return bucket_due(tokens, count, per_ms, now) - now
end
bucket_take(KEYS[1], 'bucket', tokens, now)
redis.call('PEXPIRE', KEYS[1], per_ms)
return 0
