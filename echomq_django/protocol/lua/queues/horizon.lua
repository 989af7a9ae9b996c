-- horizon: the server clock and the earliest instant the metronome must act at.
-- KEYS[1] schedule emq:{q}:schedule
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] repeat   emq:{q}:repeat
-- KEYS[4] synced   emq:{q}:synced, the marker the declared schedules' sync writes
-- Returns: {now_ms, next_ms, synced} where next_ms is the lowest head score
--   of the three sets, or -1 when all are empty, and synced is 1 while the
--   sync marker exists, else 0 (the registry may have been lost).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
-- @include now
-- @include base
local bad_key = check_keys({{KEYS[1], 'schedule'}, {KEYS[2], 'active'}, {KEYS[3], 'repeat'},
  {KEYS[4], 'synced'}})
if bad_key then return bad_key end
local next_ms = -1
for i = 1, 3 do
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if head[2] ~= nil then
    local score = tonumber(head[2])
    if next_ms == -1 or score < next_ms then
      next_ms = score
    end
  end
end
return {now_ms(), next_ms, redis.call('EXISTS', KEYS[4])}
