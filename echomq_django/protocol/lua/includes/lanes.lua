-- Lanes: a fair lane per group, served round-robin (docs/protocol.md, "Lanes").
-- Every key here is derived from the queue's root (`base`, checked by the
-- caller or taken from a declared key), so it stays in the queue's slot:
--   base .. 'pending'              the lane of ungrouped jobs ('' below)
--   base .. 'g:<group>:pending'    a group's lane (seed 001's key)
--   base .. 'lanes'       ZSET lane -> jobs waiting in it; every lane with work
--   base .. 'lanes_total' STRING jobs waiting in every lane: the sum of the
--                         scores of 'lanes', kept beside it so the admin
--                         reads the queue's pending count in one GET
--   base .. 'ring'        ZSET lane -> turn: the ready lanes, lowest turn first
--   base .. 'turn'        STRING the turn counter
--   base .. 'capped'      SET lanes at their concurrency cap, with work waiting
--   base .. 'waiting'     ZSET lane -> ms its next token is due (rate-limited)
--   base .. 'lane_active' HASH lane -> running jobs (groups only)
--   base .. 'limits'      HASH the queue's limits (Jobs.set_limits) and the
--                         archive stream's cap (archive_max, Queues.set_archive)
--   base .. 'buckets'     HASH token buckets: 'queue' and 'g:<group>'
--   base .. 'wake'        LIST wake markers
-- The invariant every script keeps: a lane with work is in exactly one of
-- ring, capped and waiting; a lane without work is in none.
-- Needs: signal, base.
-- @include signal
-- @include base

local UNGROUPED = ''
local LANE_WAKE_CAP = 100

local function lane_pending(base, lane)
  if lane == UNGROUPED then
    return base .. 'pending'
  end
  return base .. 'g:' .. lane .. ':pending'
end

-- lane_of(row): the job's lane ('' when it has no group).
local function lane_of(row)
  return redis.call('HGET', row, 'group') or UNGROUPED
end

-- lane_admit(base, lane, id, priority): id joins its lane (score -priority:
-- ZPOPMIN serves the highest priority first, then mint order); a lane that
-- had no work joins the ring at the back. lane_admit and lane_left are the
-- only places that count jobs in and out of 'lanes' and 'lanes_total'.
local function lane_admit(base, lane, id, priority)
  if redis.call('ZADD', lane_pending(base, lane), -priority, id) == 1 then
    redis.call('INCR', base .. 'lanes_total')
    if tonumber(redis.call('ZINCRBY', base .. 'lanes', 1, lane)) == 1 then
      redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
    end
  end
end

-- lane_left(base, lane, n): n jobs fewer (1 when nil) wait in lane; a lane
-- left without work leaves the ring, the capped set and the waiting set.
-- Returns whether it still has work. The total loses what the lane counted of
-- the n (a lane counted short, as a repair finds it, gives up only what it
-- counted), as n calls of one each would.
local function lane_left(base, lane, n)
  n = n or 1
  local left = tonumber(redis.call('ZINCRBY', base .. 'lanes', -n, lane))
  local counted = math.min(n, left + n)
  if counted > 0 then
    redis.call('DECRBY', base .. 'lanes_total', counted)
  end
  if left > 0 then
    return true
  end
  redis.call('ZREM', base .. 'lanes', lane)
  redis.call('ZREM', base .. 'ring', lane)
  redis.call('SREM', base .. 'capped', lane)
  redis.call('ZREM', base .. 'waiting', lane)
  return false
end

-- lane_drop(base, lane, id): id leaves its lane without being claimed
-- (cancel, delete). Returns whether it was there.
local function lane_drop(base, lane, id)
  if redis.call('ZREM', lane_pending(base, lane), id) == 0 then
    return false
  end
  lane_left(base, lane)
  return true
end

-- queue_limits(base): the queue's limits hash as {concurrency,
-- lane_concurrency, rate_count, rate_per_ms, lane_rate_count,
-- lane_rate_per_ms, archive_max} (nil where unset; archive_max is the
-- archive stream's cap, includes/archive.lua), read once per script run: no
-- script that reads them changes them, so finish's outcomes, its claim and
-- the archive's event share one read.
local limits_read = {}
local function queue_limits(base)
  local limits = limits_read[base]
  if not limits then
    limits = redis.call('HMGET', base .. 'limits', 'concurrency', 'lane_concurrency',
      'rate_count', 'rate_per_ms', 'lane_rate_count', 'lane_rate_per_ms', 'archive_max')
    limits_read[base] = limits
  end
  return limits
end

-- lane_freed(base, lane): a job of lane ended its lease. One fewer runs; a
-- capped lane below its cap rejoins the ring; a consumer is woken when the
-- lane or the queue has a cap (a claim may succeed now).
local function lane_freed(base, lane)
  local limits = queue_limits(base)
  local woke = false
  if lane ~= UNGROUPED then
    local left = redis.call('HINCRBY', base .. 'lane_active', lane, -1)
    if left <= 0 then
      redis.call('HDEL', base .. 'lane_active', lane)
    end
    local cap = tonumber(limits[2])
    if (not cap or left < cap) and redis.call('SREM', base .. 'capped', lane) == 1 then
      redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
      woke = true
    end
  end
  if woke or limits[1] then
    signal(base .. 'wake', 1, LANE_WAKE_CAP)
  end
end
