-- mark_synced: record that the declared schedules were synced into this
-- queue's registry; the metronome's horizon reads it, and a marker that is
-- gone (a flush, a restart without persistence) makes it sync again.
-- KEYS[1] synced       emq:{q}:synced, STRING
-- Returns: the server time written (ms).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
-- @include now
-- @include base
local bad_key = check_keys({{KEYS[1], 'synced'}})
if bad_key then return bad_key end
local now = now_ms()
redis.call('SET', KEYS[1], now)
return now
