-- end_lease(row, active, claims, id, token): the job leaves the active set and
-- loses its token and deadline, so the old holder is fenced out from now on;
-- the claims index forgets the token; its lane has one job fewer running.
-- Needs: lanes, beat.
-- @include beat
-- @include lanes
local function end_lease(row, active, claims, id, token)
  redis.call('ZREM', active, id)
  redis.call('HDEL', row, 'token', 'lease_until_ms')
  redis.call('HDEL', claims, token)
  lane_freed(queue_root(active), lane_of(row))
end

-- park(row, schedule, beat, id, score): the job waits on the schedule set at
-- score (state scheduled, run_at_ms); the metronome's beat is marked when this
-- run-at is earlier than the instant it plans to wake at. Needs: beat.
local function park(row, schedule, beat, id, score)
  redis.call('HSET', row, 'state', 'scheduled', 'run_at_ms', score)
  redis.call('ZADD', schedule, score, id)
  mark_beat(beat, score)
end
