-- mark_synced: record that the declared schedules were synced into this
-- queue's registry; the metronome's horizon reads it, and a marker that is
-- gone (a flush, a restart without persistence) makes it sync again.
-- KEYS[1] synced       emq:{q}:synced, STRING
-- Returns: the server time written (ms).
-- @include now
local now = now_ms()
redis.call('SET', KEYS[1], now)
return now
