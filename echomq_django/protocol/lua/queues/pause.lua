-- pause: consumers stop claiming from the queue; the metronome keeps promoting.
-- KEYS[1] paused   emq:{q}:paused
-- Returns: 1 paused now, 0 already paused.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
-- @include now
-- @include base
local bad_key = check_keys({{KEYS[1], 'paused'}})
if bad_key then return bad_key end
return redis.call('SET', KEYS[1], now_ms(), 'NX') and 1 or 0
