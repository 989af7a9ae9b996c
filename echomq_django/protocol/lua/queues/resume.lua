-- resume: consumers claim from the queue again; wake as many as there are
-- ready lanes (every lane's work counts, grouped or not).
-- KEYS[1] paused   emq:{q}:paused
-- KEYS[2] pending  emq:{q}:pending (its root names the lane keys)
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] wake_cap most wake markers kept, 1..10000
-- Returns: 1 resumed now, 0 was not paused.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include signal
-- @include base
local bad_key = check_keys({{KEYS[1], 'paused'}, {KEYS[2], 'pending'}, {KEYS[3], 'wake'}})
if bad_key then return bad_key end
local wake_cap, bad_arg = int_arg(ARGV[1], 'wake_cap', 1, 10000)
if bad_arg then return bad_arg end
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
signal(KEYS[3], redis.call('ZCARD', queue_root(KEYS[2]) .. 'ring'), wake_cap)
return 1
