-- claim_jobs(k, base, consumer, lease_ms, wake_cap, batch, want, now, out):
-- the one way a consumer leases jobs (jobs/claim, and jobs/finish after it
-- records outcomes): up to `want` ready jobs, lanes served round-robin within
-- the queue's limits, fenced by batch .. '.' .. i (docs/protocol.md, "claim",
-- "Lanes", "Limits", "Fencing tokens"). k holds the checked keys: k.active,
-- k.claims, k.wake, k.beat, k.paused (every other key is derived from base).
-- Appends each job to out as {job_id, token, payload, attempts,
-- lease_deadline_ms, snoozes, group} and sets out[2] to the first instant a
-- token comes due when claiming stopped for want of one (else leaves it).
-- A repeat with a batch token whose leases are still held appends those
-- leases again, every one of them whatever `want` the repeat asks (a claim is
-- idempotent; a caller that repeats with less room must not strand the rest). The metronome's beat is marked only
-- when the new deadline is earlier than its plan (includes/beat.lua).
-- Needs: signal, base, lanes, bucket, beat, payload.
-- @include signal
-- @include base
-- @include lanes
-- @include bucket
-- @include beat
-- @include payload
-- lease_row(row, found, consumer, token, deadline, now): the claimed job's
-- row takes the lease: state active, attempts + 1 (found[2] is the row's
-- attempts), the token, holder and deadline, and the start (the first
-- start too on a first attempt). worker.<n>: who ran attempt n ("The job
-- row"); the first attempt's start is kept apart from the last one's.
-- Returns the attempt's number.
local function lease_row(row, found, consumer, token, deadline, now)
  local attempts = tonumber(found[2] or '0') + 1
  if attempts == 1 then
    redis.call('HSET', row, 'state', 'active', 'attempts', attempts, 'token', token,
      'consumer', consumer, 'lease_until_ms', deadline, 'started_at_ms', now,
      'worker.1', consumer, 'first_started_at_ms', now)
  else
    redis.call('HSET', row, 'state', 'active', 'attempts', attempts, 'token', token,
      'consumer', consumer, 'lease_until_ms', deadline, 'started_at_ms', now,
      'worker.' .. attempts, consumer)
  end
  return attempts
end

local function claim_jobs(k, base, consumer, lease_ms, wake_cap, batch, want, now, out)
  local first = #out

  -- A repeat of a claim whose reply was lost: answer every lease it holds
  -- (at most 1000, the most one claim takes), even past `want`: the caller
  -- may repeat with less room than it first asked for, and a lease left out
  -- would be held by nobody until reaped.
  for i = 1, 1000 do
    local token = batch .. '.' .. i
    local held = redis.call('HGET', k.claims, token)
    if not held then
      break
    end
    local found = redis.call('HMGET', base .. 'job:' .. held, 'state', 'token', 'payload',
      'attempts', 'lease_until_ms', 'snoozes', 'group')
    if found[1] == 'active' and found[2] == token then
      out[#out + 1] = {held, token, read_payload(base .. 'job:' .. held), tonumber(found[4]),
        tonumber(found[5]), tonumber(found[6] or '0'), found[7] or ''}
    end
  end
  if #out > first then
    return
  end
  if redis.call('EXISTS', k.paused) == 1 then
    return
  end

  local limits = queue_limits(base)
  local cap, lane_cap = tonumber(limits[1]), tonumber(limits[2])
  local rate, rate_per = tonumber(limits[3]), tonumber(limits[4])
  local lane_rate, lane_rate_per = tonumber(limits[5]), tonumber(limits[6])
  local buckets = base .. 'buckets'

  -- Rate-limited lanes whose token is due rejoin the ring (a bounded number).
  -- Only a lane rate puts lanes there, and a change of limits empties it
  -- (queues/set_limits.lua): without one there is nothing to read.
  if lane_rate then
    for _, lane in ipairs(redis.call('ZRANGEBYSCORE', base .. 'waiting', '-inf', now,
        'LIMIT', 0, 100)) do
      redis.call('ZREM', base .. 'waiting', lane)
      redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
    end
  end

  local deadline = now + lease_ms
  local claimed = 0
  -- Each turn of the loop claims a job or takes a lane out of the ring (at its
  -- cap, out of tokens, or emptied by stale members), so the loop is bounded.
  for _ = 1, want + 100 do
    if claimed >= want then
      break
    end
    local running = cap and redis.call('ZCARD', k.active)
    if cap and running >= cap then
      break  -- the queue runs its most; a finishing job wakes a consumer
    end
    local queue_tokens
    if rate then
      queue_tokens = bucket_level(buckets, 'queue', rate, rate_per, now)
      if queue_tokens < 1 then
        out[2] = bucket_due(queue_tokens, rate, rate_per, now)
        break
      end
    end
    -- The front lane, and whether another waits behind it (a lone lane
    -- needs no move to the back: there is nobody to be fair to).
    local ring = redis.call('ZRANGE', base .. 'ring', 0, 1)
    if #ring == 0 then
      break
    end
    local lane = ring[1]
    local grouped = lane ~= UNGROUPED
    local at_cap = grouped and lane_cap ~= nil
      and tonumber(redis.call('HGET', base .. 'lane_active', lane) or '0') >= lane_cap
    local lane_tokens
    if grouped and lane_rate and not at_cap then
      lane_tokens = bucket_level(buckets, 'g:' .. lane, lane_rate, lane_rate_per, now)
    end
    if at_cap then
      redis.call('ZREM', base .. 'ring', lane)
      redis.call('SADD', base .. 'capped', lane)
    elseif lane_tokens and lane_tokens < 1 then
      local due = bucket_due(lane_tokens, lane_rate, lane_rate_per, now)
      redis.call('ZREM', base .. 'ring', lane)
      redis.call('ZADD', base .. 'waiting', due, lane)
      if out[2] == -1 or due < out[2] then
        out[2] = due
      end
    elseif lane == UNGROUPED and #ring == 1 and not rate then
      -- The ungrouped lane is the only one ready and no queue rate applies:
      -- its next jobs are what claims one at a time would take, in the same
      -- order (ZPOPMIN's), popped in one call and indexed in one call each.
      -- (A lane counted short of what it holds, which only a repair meets,
      -- gives up what it holds, up to the room, where one at a time would
      -- stop at its count and strand the rest; its count ends at zero.)
      local room = want - claimed
      if cap then
        room = math.min(room, cap - running)
      end
      local popped = redis.call('ZPOPMIN', lane_pending(base, lane), room)
      -- None popped: a lane counted without work, repaired as one at a time.
      lane_left(base, lane, math.max(#popped / 2, 1))
      local index, deadlines = {}, {}
      for j = 1, #popped, 2 do
        local id = popped[j]
        local row = base .. 'job:' .. id
        local found = redis.call('HMGET', row, 'state', 'attempts', 'snoozes',
          unpack(PAYLOAD_FIELDS))
        if found[1] == 'pending' then  -- else dropped, as one at a time drops it
          claimed = claimed + 1
          local token = batch .. '.' .. claimed
          local attempts = lease_row(row, found, consumer, token, deadline, now)
          index[#index + 1] = token
          index[#index + 1] = id
          deadlines[#deadlines + 1] = deadline
          deadlines[#deadlines + 1] = id
          out[#out + 1] = {id, token, join_payload(found, 4), attempts, deadline,
            tonumber(found[3] or '0'), ''}
        end
      end
      if #index > 0 then
        redis.call('HSET', k.claims, unpack(index))
        redis.call('ZADD', k.active, unpack(deadlines))
      end
    else
      local popped = redis.call('ZPOPMIN', lane_pending(base, lane))
      local id = popped[1]
      local more = false
      if id then
        more = lane_left(base, lane)
      else
        lane_left(base, lane)  -- a lane counted without work: repaired
      end
      if more and #ring > 1 then
        redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
      end
      local row = id and base .. 'job:' .. id
      -- One read of the row: its state, attempts, snoozes and payload.
      local found = row and redis.call('HMGET', row, 'state', 'attempts', 'snoozes',
        unpack(PAYLOAD_FIELDS))
      -- A member whose row is gone or not pending (an expired id enqueued
      -- again) is dropped, and takes no token.
      if found and found[1] == 'pending' then
        if rate then
          bucket_take(buckets, 'queue', queue_tokens, now)
        end
        if grouped and lane_rate then
          bucket_take(buckets, 'g:' .. lane, lane_tokens, now)
        end
        claimed = claimed + 1
        local token = batch .. '.' .. claimed
        local attempts = lease_row(row, found, consumer, token, deadline, now)
        redis.call('HSET', k.claims, token, id)
        redis.call('ZADD', k.active, deadline, id)
        if grouped then
          redis.call('HINCRBY', base .. 'lane_active', lane, 1)
        end
        out[#out + 1] = {id, token, join_payload(found, 4), attempts, deadline,
          tonumber(found[3] or '0'), grouped and lane or ''}
      end
    end
  end
  -- Short of jobs while lanes wait for tokens: say when the first one is due,
  -- so the caller sleeps until then instead of polling.
  if lane_rate and claimed < want and out[2] == -1 then
    local soonest = redis.call('ZRANGE', base .. 'waiting', 0, 0, 'WITHSCORES')
    if soonest[2] then
      out[2] = tonumber(soonest[2])
    end
  end
  if claimed > 0 then
    mark_beat(k.beat, deadline)
    -- Chain the wake-up: while ready work remains, wake one more idle
    -- consumer. A marker already waiting wakes one (busy consumers leave it
    -- there), so a busy queue pays one LLEN per claim, not a push.
    if redis.call('LLEN', k.wake) == 0 and redis.call('ZCARD', base .. 'ring') > 0 then
      signal(k.wake, 1, wake_cap)
    end
  end
end
