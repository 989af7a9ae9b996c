-- claim: pop the oldest pending job and lease it to a consumer.
-- KEYS[1] pending  emq:{q}:pending
-- KEYS[2] active   emq:{q}:active (score = lease deadline ms)
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5] beat     emq:{q}:beat, wakes the metronome when this lease is the
--                  earliest deadline (so reap runs on time)
-- KEYS[6] paused   emq:{q}:paused, present while the queue is paused
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] consumer a name for the holder (host:pid:thread), non-empty
-- ARGV[3] lease_ms the lease length, 1..2^53
-- ARGV[4] wake_cap most wake markers kept, 1..10000
-- ARGV[5] token    the fencing token for this lease, chosen by the caller and
--                  never reused (docs/protocol.md, "Fencing tokens")
-- Returns: nil when pending is empty or the queue is paused, else
--   {job_id, token, payload, attempts, lease_deadline_ms, now_ms, snoozes}.
--   A repeat with a token that already holds a lease (the first reply was
--   lost) answers that same lease again: a claim is idempotent per token.
-- Errors: EMQKEY the base root is not the prefix of KEYS[1];
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include base
local bad = check_base(ARGV[1], KEYS[1])
if bad then return bad end
local _, bad_consumer = text_arg(ARGV[2], 'consumer')
if bad_consumer then return bad_consumer end
local _, bad_token = text_arg(ARGV[5], 'token')
if bad_token then return bad_token end
local n, bad_arg = ints({{ARGV[3], 'lease_ms', 1, MAX_MS}, {ARGV[4], 'wake_cap', 1, 10000}})
if bad_arg then return bad_arg end
local base, token = ARGV[1], ARGV[5]
local held = redis.call('HGET', KEYS[3], token)
if held then
  local found = redis.call('HMGET', base .. 'job:' .. held, 'state', 'token', 'payload',
    'attempts', 'lease_until_ms', 'snoozes')
  if found[1] == 'active' and found[2] == token then
    return {held, token, found[3], tonumber(found[4]), tonumber(found[5]), now_ms(),
      tonumber(found[6] or '0')}
  end
  redis.call('HDEL', KEYS[3], token)
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  return nil
end
-- A member whose row is gone (deleted by hand) or not pending (an expired id
-- enqueued again elsewhere) is dropped, a bounded number of times per call,
-- so one claim never walks an unbounded set.
for _ = 1, 100 do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if popped[1] == nil then
    return nil
  end
  local id = popped[1]
  local row = base .. 'job:' .. id
  if redis.call('HGET', row, 'state') == 'pending' then
    local now = now_ms()
    local deadline = now + n[1]
    local attempts = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'token', token, 'consumer', ARGV[2],
      'lease_until_ms', deadline, 'started_at_ms', now)
    redis.call('HSET', KEYS[3], token, id)
    local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    redis.call('ZADD', KEYS[2], deadline, id)
    if head[2] == nil or deadline < tonumber(head[2]) then
      signal(KEYS[5], 1, 1)
    end
    -- Chain the wake-up: while work remains, wake one more idle consumer.
    if redis.call('ZCARD', KEYS[1]) > 0 then
      signal(KEYS[4], 1, n[2])
    end
    local found = redis.call('HMGET', row, 'payload', 'snoozes')
    return {id, token, found[1], attempts, deadline, now, tonumber(found[2] or '0')}
  end
end
return nil
