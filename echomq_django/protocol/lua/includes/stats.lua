-- count(base, kind, now, ttl_ms): add one to this minute's counter of kind
-- ("done"; "failed": a failed attempt, retried or not; "dead": a job that
-- ended dead, counted beside its last attempt's "failed"); the counter expires on its own, so no sweep is needed.
local function count(base, kind, now, ttl_ms)
  local key = base .. 'stats:' .. kind .. ':' .. tostring(math.floor(now / 60000))
  -- The counter expires ttl_ms after its minute's first count (set once).
  if redis.call('INCR', key) == 1 then
    redis.call('PEXPIRE', key, ttl_ms)
  end
end
