-- due: the server clock and the recurring schedules due at it.
-- KEYS[1] repeat       emq:{q}:repeat
-- ARGV[1] limit        most names returned
-- Returns: {now_ms, name1, score1, name2, score2, ...}, earliest first, every
--   name whose next-run score is at or before the server's now.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include base
local bad_key = check_keys({{KEYS[1], 'repeat'}})
if bad_key then return bad_key end
local limit, bad_arg = int_arg(ARGV[1], 'limit', 1, 100000)
if bad_arg then return bad_arg end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
table.insert(due, 1, now)
return due
