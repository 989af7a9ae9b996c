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
-- An outcome that ends the job (done, dead, cancelled) appends the archive's
-- event (includes/archive.lua). Needs: settle, stats, lease, retention,
-- archive.
-- @include settle
-- @include stats
-- @include lease
-- @include retention
-- @include archive

-- open_outcome(k, base, id, token, keep, op): the start all four share
-- (includes/settle.lua). Returns row, now, err, early, attempts: err an
-- EMQSTALE reply; early the state to answer at once (a repeat's recorded
-- outcome, or 'cancelled'); neither when the caller records its outcome now;
-- attempts the attempt the lease ran.
local function open_outcome(k, base, id, token, keep, op)
  local row = base .. 'job:' .. id
  local err, now, cancelled, replay, attempts = settle(row, k.active, k.claims, id, token,
    keep.keep_ms, op)
  if err then return row, now, err, nil end
  if replay then return row, now, nil, replay end
  if cancelled then return row, now, nil, 'cancelled' end
  return row, now, nil, nil, attempts
end

-- attempt_error(fields, attempts, error_text, error_class): the failed
-- attempt's own record ("The job row": error.<n>, error_class.<n>), added to
-- the fields the outcome writes, so every attempt's error is kept.
local function attempt_error(fields, attempts, error_text, error_class)
  fields[#fields + 1] = 'error.' .. attempts
  fields[#fields + 1] = error_text
  if error_class ~= '' then
    fields[#fields + 1] = 'error_class.' .. attempts
    fields[#fields + 1] = error_class
  end
  return fields
end

-- forget_progress(row): an attempt that ends for another to come (retry,
-- snooze) takes its progress report with it: the next attempt starts with
-- none ("no progress reported").
local function forget_progress(row)
  redis.call('HDEL', row, 'progress', 'progress_message', 'progress_at_ms')
end

local function finish_ack(k, base, id, token, result, keep)
  local row, now, err, early = open_outcome(k, base, id, token, keep, 'ack')
  if err or early then return err, now, early end
  redis.call('HSET', row, 'state', 'done', 'finished_at_ms', now, 'result', result,
    unpack(settled_fields(token, 'ack', 'done')))
  redis.call('PEXPIRE', row, keep.keep_ms)
  count(base, 'done', now, keep.stats_ttl_ms)
  archive_end(row, 'done', now)
  return nil, now, 'done'
end

local function finish_retry(k, base, id, token, delay_ms, error_text, error_class, keep)
  local row, now, err, early, attempts = open_outcome(k, base, id, token, keep, 'retry')
  if err or early then return err, now, early end
  local score = now + delay_ms
  local fields = settled_fields(token, 'retry', 'scheduled')
  fields[5], fields[6], fields[7], fields[8] = 'last_error', error_text, 'failed_at_ms', now
  park(row, k.schedule, k.beat, id, score, attempt_error(fields, attempts, error_text,
    error_class))
  forget_progress(row)
  count(base, 'failed', now, keep.stats_ttl_ms)
  return nil, score, 'scheduled'
end

local function finish_snooze(k, base, id, token, delay_ms, keep)
  local row, now, err, early = open_outcome(k, base, id, token, keep, 'snooze')
  if err or early then return err, now, early end
  local score = now + delay_ms
  redis.call('HINCRBY', row, 'attempts', -1)
  redis.call('HINCRBY', row, 'snoozes', 1)
  park(row, k.schedule, k.beat, id, score, settled_fields(token, 'snooze', 'scheduled'))
  forget_progress(row)
  return nil, score, 'scheduled'
end

local function finish_dead(k, base, id, token, reason, error_text, error_class, keep)
  local row, now, err, early, attempts = open_outcome(k, base, id, token, keep, 'dead')
  if err or early then return err, now, early end
  bury(base, k.dead, id, now, reason, error_text,
    {ttl_ms = keep.dead_ttl_ms, max = keep.dead_max, stats_ttl_ms = keep.stats_ttl_ms},
    attempt_error(settled_fields(token, 'dead', 'dead'), attempts, error_text, error_class))
  return nil, now, 'dead'
end
