-- extend: push an active job's lease deadline to server now + lease_ms.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] beat     emq:{q}:beat, wakes the metronome when the deadline moves earlier
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] lease_ms the new lease length, from now
-- Returns: the new deadline, server ms.
-- Errors: EMQSTALE the token does not hold the lease (nothing changes).
-- @include now
-- @include signal
-- @include fence
local stale = fence(KEYS[1], ARGV[2])
if stale then return stale end
local deadline = now_ms() + tonumber(ARGV[3])
local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
redis.call('HSET', KEYS[1], 'lease_until_ms', deadline)
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
if head[2] == nil or deadline < tonumber(head[2]) then
  signal(KEYS[3], 1, 1)
end
return deadline
