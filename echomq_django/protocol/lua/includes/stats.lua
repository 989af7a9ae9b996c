-- count(base, kind, now, ttl_ms): add one to this minute's counter of kind
-- ("done" or "failed"); the counter expires on its own, so no sweep is needed.
local function count(base, kind, now, ttl_ms)
  local key = base .. 'stats:' .. kind .. ':' .. tostring(math.floor(now / 60000))
  redis.call('INCR', key)
  redis.call('PEXPIRE', key, ttl_ms)
end
