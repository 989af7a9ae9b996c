-- reap: hand every lease past its deadline back to pending.
-- KEYS[1] active   emq:{q}:active
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most leases reaped by this call
-- ARGV[3] wake_cap most wake markers kept
-- Returns: the count handed back.
-- Errors: EMQKEY the base root is not the prefix of KEYS[1].
-- @include now
-- @include signal
-- @include base
local bad = check_base(ARGV[1], KEYS[1])
if bad then return bad end
local base = ARGV[1]
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[2]))
local count = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local row = base .. 'job:' .. id
  if redis.call('HGET', row, 'state') == 'active' then
    -- Dropping the token fences the old holder out: its ack, retry or dead
    -- now fails with EMQSTALE.
    redis.call('HDEL', row, 'token', 'lease_until_ms')
    redis.call('HINCRBY', row, 'stalls', 1)
    redis.call('HSET', row, 'state', 'pending')
    redis.call('ZADD', KEYS[2], 0, id)
    count = count + 1
  end
end
signal(KEYS[3], count, tonumber(ARGV[3]))
return count
