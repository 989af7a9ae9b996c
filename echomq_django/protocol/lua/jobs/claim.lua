-- claim: pop the oldest pending job and lease it to a consumer.
-- KEYS[1] pending  emq:{q}:pending
-- KEYS[2] active   emq:{q}:active (score = lease deadline ms)
-- KEYS[3] token    emq:{q}:token (fencing token counter)
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5] beat     emq:{q}:beat, wakes the metronome when this lease is the
--                  earliest deadline (so reap runs on time)
-- KEYS[6] paused   emq:{q}:paused, present while the queue is paused
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] consumer a name for the holder (host:pid:thread)
-- ARGV[3] lease_ms the lease length
-- ARGV[4] wake_cap most wake markers kept
-- Returns: nil when pending is empty or the queue is paused, else
--   {job_id, token, payload, attempts, lease_deadline_ms, now_ms, snoozes}.
-- Errors: EMQKEY the base root is not the prefix of KEYS[1].
-- @include now
-- @include signal
-- @include base
local bad = check_base(ARGV[1], KEYS[1])
if bad then return bad end
local base = ARGV[1]
if redis.call('EXISTS', KEYS[6]) == 1 then
  return nil
end
-- A member whose row is gone (deleted by hand) is skipped, a bounded number
-- of times per call, so one claim never walks an unbounded set.
for _ = 1, 100 do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if popped[1] == nil then
    return nil
  end
  local id = popped[1]
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    local now = now_ms()
    local deadline = now + tonumber(ARGV[3])
    local token = tostring(redis.call('INCR', KEYS[3]))
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'token', token, 'consumer', ARGV[2],
      'lease_until_ms', deadline, 'started_at_ms', now)
    local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    redis.call('ZADD', KEYS[2], deadline, id)
    if head[2] == nil or deadline < tonumber(head[2]) then
      signal(KEYS[5], 1, 1)
    end
    -- Chain the wake-up: while work remains, wake one more idle consumer.
    if redis.call('ZCARD', KEYS[1]) > 0 then
      signal(KEYS[4], 1, tonumber(ARGV[4]))
    end
    local found = redis.call('HMGET', row, 'payload', 'snoozes')
    return {id, token, found[1], attempts, deadline, now, tonumber(found[2] or '0')}
  end
end
return nil
