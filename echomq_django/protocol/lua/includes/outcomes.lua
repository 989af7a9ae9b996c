-- The four outcomes a handler's attempt ends in, each the one home of its rule
-- (docs/protocol.md, "ack", "retry", "snooze", "dead"): the single scripts
-- (jobs/ack, jobs/retry, jobs/snooze, jobs/dead) and jobs/finish, which
-- records several and claims the next jobs in the same call, all run these.
-- Each takes k, the checked keys (k.active, k.claims; k.schedule and k.beat
-- for retry and snooze; k.dead for dead), the queue's base, the job's id and
-- the token the claim returned, and keep: {keep_ms, stats_ttl_ms, dead_ttl_ms,
-- dead_max} as the outcome needs. The caller has checked every argument.
-- Each returns err, at_ms, state:
--   err    an EMQSTALE error reply: the token does not hold the lease (nothing
--          changed);
--   at_ms  when it finished (ack, dead, cancelled) or runs again (retry,
--          snooze: its run-at); the server's now for a repeat;
--   state  'done', 'scheduled', 'dead', or 'cancelled' when a cancel was
--          requested while it ran; a repeat by the same token (its first reply
--          lost) answers the outcome recorded then (see includes/settle.lua).
-- Needs: settle, stats, lease, retention.
-- @include settle
-- @include stats
-- @include lease
-- @include retention

local function finish_ack(k, base, id, token, result, keep)
  local row = base .. 'job:' .. id
  local err, now, cancelled, replay = settle(row, k.active, k.claims, id, token, keep.keep_ms,
    'ack')
  if err then return err end
  if replay then return nil, now, replay end
  if cancelled then return nil, now, 'cancelled' end
  redis.call('HSET', row, 'state', 'done', 'finished_at_ms', now, 'result', result)
  settled(row, token, 'ack', 'done')
  redis.call('PEXPIRE', row, keep.keep_ms)
  count(base, 'done', now, keep.stats_ttl_ms)
  return nil, now, 'done'
end

local function finish_retry(k, base, id, token, delay_ms, error_text, keep)
  local row = base .. 'job:' .. id
  local err, now, cancelled, replay = settle(row, k.active, k.claims, id, token, keep.keep_ms,
    'retry')
  if err then return err end
  if replay then return nil, now, replay end
  if cancelled then return nil, now, 'cancelled' end
  local score = now + delay_ms
  redis.call('HSET', row, 'last_error', error_text, 'failed_at_ms', now)
  park(row, k.schedule, k.beat, id, score)
  settled(row, token, 'retry', 'scheduled')
  count(base, 'failed', now, keep.stats_ttl_ms)
  return nil, score, 'scheduled'
end

local function finish_snooze(k, base, id, token, delay_ms, keep)
  local row = base .. 'job:' .. id
  local err, now, cancelled, replay = settle(row, k.active, k.claims, id, token, keep.keep_ms,
    'snooze')
  if err then return err end
  if replay then return nil, now, replay end
  if cancelled then return nil, now, 'cancelled' end
  local score = now + delay_ms
  redis.call('HINCRBY', row, 'attempts', -1)
  redis.call('HINCRBY', row, 'snoozes', 1)
  park(row, k.schedule, k.beat, id, score)
  settled(row, token, 'snooze', 'scheduled')
  return nil, score, 'scheduled'
end

local function finish_dead(k, base, id, token, reason, error_text, keep)
  local row = base .. 'job:' .. id
  local err, now, cancelled, replay = settle(row, k.active, k.claims, id, token, keep.keep_ms,
    'dead')
  if err then return err end
  if replay then return nil, now, replay end
  if cancelled then return nil, now, 'cancelled' end
  bury(base, k.dead, id, now, reason, error_text,
    {ttl_ms = keep.dead_ttl_ms, max = keep.dead_max, stats_ttl_ms = keep.stats_ttl_ms})
  settled(row, token, 'dead', 'dead')
  return nil, now, 'dead'
end
