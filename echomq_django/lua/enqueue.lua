-- enqueue: admit a job straight to pending.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] job_id   must start with JOB
-- ARGV[2] payload  JSON text
-- ARGV[3] wake_cap most wake markers kept
-- Returns: 1 enqueued, 0 duplicate (the row exists; nothing changes).
-- Errors: EMQKIND the id is not JOB-namespaced.
-- @include now
-- @include signal
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2],
  'enqueued_at_ms', now_ms())
redis.call('ZADD', KEYS[2], 0, ARGV[1])
signal(KEYS[3], 1, tonumber(ARGV[3]))
return 1
