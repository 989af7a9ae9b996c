-- pause: consumers stop claiming from the queue; the metronome keeps promoting.
-- KEYS[1] paused   emq:{q}:paused
-- Returns: 1 paused now, 0 already paused.
-- @include now
return redis.call('SET', KEYS[1], now_ms(), 'NX') and 1 or 0
