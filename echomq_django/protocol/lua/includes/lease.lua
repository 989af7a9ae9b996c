-- end_lease(row, active, claims, id, token): the job leaves the active set and
-- loses its token and deadline, so the old holder is fenced out from now on;
-- the claims index forgets the token; its lane has one job fewer running
-- (`lane`, when the caller read the row's group already; else read here).
-- Needs: lanes, beat.
-- @include beat
-- @include lanes
-- While a script records several outcomes (jobs/finish), it gathers the
-- active-set and claims-index removals of their ends (defer_lease_ends) and
-- sends each as one call after the last (flush_lease_ends); nothing between
-- reads either key.
local lease_ends = nil

local function end_lease(row, active, claims, id, token, lane)
  if lease_ends then
    lease_ends.ids[#lease_ends.ids + 1] = id
    lease_ends.tokens[#lease_ends.tokens + 1] = token
  else
    redis.call('ZREM', active, id)
    redis.call('HDEL', claims, token)
  end
  redis.call('HDEL', row, 'token', 'lease_until_ms')
  lane_freed(queue_root(active), lane or lane_of(row))
end

local function defer_lease_ends()
  lease_ends = {ids = {}, tokens = {}}
end

-- How many values one call takes from a list (the server's Lua unpacks at
-- most about 8,000 values into one call; finish sets no bound on outcomes).
local CALL_CHUNK = 1000

local function call_in_chunks(command, key, values)
  for first = 1, #values, CALL_CHUNK do
    redis.call(command, key, unpack(values, first, math.min(first + CALL_CHUNK - 1, #values)))
  end
end

local function flush_lease_ends(active, claims)
  local ends = lease_ends
  lease_ends = nil
  if ends then
    call_in_chunks('ZREM', active, ends.ids)
    call_in_chunks('HDEL', claims, ends.tokens)
  end
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
