-- resume: consumers claim from the queue again; wake as many as there is work for.
-- KEYS[1] paused   emq:{q}:paused
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] wake_cap most wake markers kept
-- Returns: 1 resumed now, 0 was not paused.
-- @include signal
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
signal(KEYS[3], redis.call('ZCARD', KEYS[2]), tonumber(ARGV[1]))
return 1
