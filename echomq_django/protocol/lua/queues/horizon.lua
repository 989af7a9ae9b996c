-- horizon: the server clock, the earliest instant the metronome must act at,
-- and, for a metronome, its plan (docs/protocol.md, "Metronome").
-- KEYS[1] schedule emq:{q}:schedule
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] repeat   emq:{q}:repeat
-- KEYS[4] synced   emq:{q}:synced, the marker the declared schedules' sync writes
-- KEYS[5] beat_at  emq:{q}:beat_at, the instant a metronome plans to wake at
-- KEYS[6] wake     emq:{q}:wake
-- KEYS[7] paused   emq:{q}:paused
-- ARGV[1] max_sleep_ms 0: only read. Else, 1..2^53: the caller is a metronome
--                  that wakes at plan_ms = min(next_ms, now + max_sleep_ms)
--                  (now when something is due), stored in beat_at
--                  (includes/beat.lua) in the same step as the reading.
-- ARGV[2] nudge    0 or 1. 1: the safety net for a lost wake marker: when
--                  ready lanes exist, the wake list is empty and the queue is
--                  not paused, push one wake marker.
-- Returns: {now_ms, next_ms, synced, plan_ms, schedule_head, active_head,
--   repeat_head, now_us} where next_ms is the lowest head score of the three sets, or
--   -1 when all are empty; synced is 1 while the sync marker exists, else 0
--   (the registry may have been lost); plan_ms is the stored plan, or -1 when
--   max_sleep_ms is 0; each head is its set's lowest score, or -1 when empty;
--   now_us is the same reading of the server clock in microseconds (the
--   metronome sleeps to plan_ms from it, not from the whole ms).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include base
-- @include beat
local bad_key = check_keys({{KEYS[1], 'schedule'}, {KEYS[2], 'active'}, {KEYS[3], 'repeat'},
  {KEYS[4], 'synced'}, {KEYS[5], 'beat_at'}, {KEYS[6], 'wake'}, {KEYS[7], 'paused'}})
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[1], 'max_sleep_ms', 0, MAX_MS}, {ARGV[2], 'nudge', 0, 1}})
if bad_arg then return bad_arg end
local us = now_us()
local now = math.floor(us / 1000)
local next_ms = -1
local heads = {-1, -1, -1}
for i = 1, 3 do
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if head[2] ~= nil then
    heads[i] = tonumber(head[2])
    if next_ms == -1 or heads[i] < next_ms then
      next_ms = heads[i]
    end
  end
end
local plan = -1
if n[1] > 0 then
  plan = now + n[1]
  if next_ms ~= -1 and next_ms < plan then
    plan = math.max(next_ms, now)
  end
  plan_beat(KEYS[5], now, plan)
end
if n[2] == 1 and redis.call('EXISTS', queue_root(KEYS[1]) .. 'ring') == 1
    and redis.call('LLEN', KEYS[6]) == 0 and redis.call('EXISTS', KEYS[7]) == 0 then
  signal(KEYS[6], 1, 1)
end
return {now, next_ms, redis.call('EXISTS', KEYS[4]), plan, heads[1], heads[2], heads[3], us}
