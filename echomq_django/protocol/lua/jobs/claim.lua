-- claim: lease up to `count` ready jobs to one consumer, lanes served
-- round-robin, within the queue's limits (docs/protocol.md, "claim", "Lanes",
-- "Limits").
-- KEYS[1] pending  emq:{q}:pending (the ungrouped lane; its root names every lane key)
-- KEYS[2] active   emq:{q}:active (score = lease deadline ms)
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5] beat     emq:{q}:beat, wakes the metronome when a lease is the
--                  earliest deadline (so reap runs on time)
-- KEYS[6] paused   emq:{q}:paused, present while the queue is paused
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] consumer a name for the holder (host:pid), non-empty
-- ARGV[3] lease_ms the lease length, 1..2^53
-- ARGV[4] wake_cap most wake markers kept, 1..10000
-- ARGV[5] token    the batch token, chosen by the caller and never reused; the
--                  i-th job claimed is fenced by token .. '.' .. i
--                  (docs/protocol.md, "Fencing tokens")
-- ARGV[6] count    most jobs to claim, 1..1000
-- Returns: {now_ms, next_ms, job...}: next_ms is the first instant a token
--   comes due for a lane or the queue when claiming stopped for want of one
--   (-1 otherwise); each job is {job_id, token, payload, attempts,
--   lease_deadline_ms, snoozes, group}. No jobs when nothing is ready, the
--   queue is paused or at a limit. A repeat with the same batch token whose
--   leases are still held answers those leases again (a claim is idempotent).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include base
-- @include lanes
-- @include bucket
-- @include payload
local bad_key = check_keys({{KEYS[1], 'pending'}, {KEYS[2], 'active'}, {KEYS[3], 'claims'},
  {KEYS[4], 'wake'}, {KEYS[5], 'beat'}, {KEYS[6], 'paused'}}, ARGV[1])
if bad_key then return bad_key end
local _, bad_consumer = text_arg(ARGV[2], 'consumer')
if bad_consumer then return bad_consumer end
local _, bad_token = text_arg(ARGV[5], 'token')
if bad_token then return bad_token end
local n, bad_arg = ints({{ARGV[3], 'lease_ms', 1, MAX_MS}, {ARGV[4], 'wake_cap', 1, 10000},
  {ARGV[6], 'count', 1, 1000}})
if bad_arg then return bad_arg end
local base, batch, lease_ms, want = ARGV[1], ARGV[5], n[1], n[3]
local now = now_ms()
local out = {now, -1}

-- A repeat of a claim whose reply was lost: answer the leases it holds.
for i = 1, want do
  local token = batch .. '.' .. i
  local held = redis.call('HGET', KEYS[3], token)
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
if #out > 2 then
  return out
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  return out
end

local limits = redis.call('HMGET', base .. 'limits', 'concurrency', 'lane_concurrency',
  'rate_count', 'rate_per_ms', 'lane_rate_count', 'lane_rate_per_ms')
local cap, lane_cap = tonumber(limits[1]), tonumber(limits[2])
local rate, rate_per = tonumber(limits[3]), tonumber(limits[4])
local lane_rate, lane_rate_per = tonumber(limits[5]), tonumber(limits[6])
local buckets = base .. 'buckets'

-- Rate-limited lanes whose token is due rejoin the ring (a bounded number).
for _, lane in ipairs(redis.call('ZRANGEBYSCORE', base .. 'waiting', '-inf', now,
    'LIMIT', 0, 100)) do
  redis.call('ZREM', base .. 'waiting', lane)
  redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
end

local head_deadline = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
local deadline = now + lease_ms
local claimed = 0
-- Each turn of the loop claims a job or takes a lane out of the ring (at its
-- cap, out of tokens, or emptied by stale members), so the loop is bounded.
for _ = 1, want + 100 do
  if claimed >= want then
    break
  end
  if cap and redis.call('ZCARD', KEYS[2]) >= cap then
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
  local ring = redis.call('ZRANGE', base .. 'ring', 0, 0)
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
  else
    local popped = redis.call('ZPOPMIN', lane_pending(base, lane))
    local id = popped[1]
    local more = false
    if id then
      more = lane_left(base, lane)
    else
      lane_left(base, lane)  -- a lane counted without work: repaired
    end
    if more then
      redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
    end
    local row = id and base .. 'job:' .. id
    -- A member whose row is gone or not pending (an expired id enqueued
    -- again) is dropped, and takes no token.
    if row and redis.call('HGET', row, 'state') == 'pending' then
      if rate then
        bucket_take(buckets, 'queue', queue_tokens, now)
      end
      if grouped and lane_rate then
        bucket_take(buckets, 'g:' .. lane, lane_tokens, now)
      end
      claimed = claimed + 1
      local token = batch .. '.' .. claimed
      local attempts = redis.call('HINCRBY', row, 'attempts', 1)
      redis.call('HSET', row, 'state', 'active', 'token', token, 'consumer', ARGV[2],
        'lease_until_ms', deadline, 'started_at_ms', now)
      redis.call('HSET', KEYS[3], token, id)
      redis.call('ZADD', KEYS[2], deadline, id)
      if grouped then
        redis.call('HINCRBY', base .. 'lane_active', lane, 1)
      end
      local found = redis.call('HMGET', row, 'payload', 'snoozes')
      out[#out + 1] = {id, token, read_payload(row), attempts, deadline, tonumber(found[2] or '0'),
        grouped and lane or ''}
    end
  end
end
-- Short of jobs while lanes wait for tokens: say when the first one is due,
-- so the caller sleeps until then instead of polling.
if claimed < want and out[2] == -1 then
  local first = redis.call('ZRANGE', base .. 'waiting', 0, 0, 'WITHSCORES')
  if first[2] then
    out[2] = tonumber(first[2])
  end
end
if claimed > 0 then
  if head_deadline == nil or deadline < tonumber(head_deadline) then
    signal(KEYS[5], 1, 1)
  end
  -- Chain the wake-up: while ready work remains, wake one more idle consumer.
  if redis.call('ZCARD', base .. 'ring') > 0 then
    signal(KEYS[4], 1, n[2])
  end
end
return out
