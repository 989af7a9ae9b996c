-- end_lease(row, active, claims, id, token): the job leaves the active set and
-- loses its token and deadline, so the old holder is fenced out from now on;
-- the claims index forgets the token; its lane has one job fewer running
-- (`lane`, when the caller read the row's group already; else read here).
-- Needs: lanes, beat.
-- @include beat
-- @include lanes
local function end_lease(row, active, claims, id, token, lane)
  redis.call('ZREM', active, id)
  redis.call('HDEL', row, 'token', 'lease_until_ms')
  redis.call('HDEL', claims, token)
  lane_freed(queue_root(active), lane or lane_of(row))
end

-- park_at(row, schedule, id, score, fields): the job waits on the schedule
-- set at score (state scheduled, run_at_ms; `fields`, or nil: more
-- field/value pairs for the same HSET, a new row's). The one place a job is
-- parked; the caller marks the beat (park does, enqueue_many once per call).
local function park_at(row, schedule, id, score, fields)
  redis.call('HSET', row, 'state', 'scheduled', 'run_at_ms', score, unpack(fields or {}))
  redis.call('ZADD', schedule, score, id)
end

-- park(row, schedule, beat, id, score, fields): park_at, and the metronome's
-- beat is marked when this run-at is earlier than the instant it plans to
-- wake at (includes/beat.lua). Needs: beat.
local function park(row, schedule, beat, id, score, fields)
  park_at(row, schedule, id, score, fields)
  mark_beat(beat, score)
end
