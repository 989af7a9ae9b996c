-- due: the server clock and the recurring schedules due at it.
-- KEYS[1] repeat       emq:{q}:repeat
-- ARGV[1] limit        most names returned
-- Returns: {now_ms, name1, score1, name2, score2, ...}, earliest first, every
--   name whose next-run score is at or before the server's now.
-- @include now
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[1]))
table.insert(due, 1, now)
return due
