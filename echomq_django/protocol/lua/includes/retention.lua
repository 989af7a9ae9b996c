-- Dead letters and their retention (docs/protocol.md, "Results and
-- retention"): a letter is kept dead_ttl_ms, and at most dead_max per queue.
-- Every death trims, bounded: at most TRIM letters past their ttl and TRIM
-- beyond dead_max (the oldest) leave the set, so the set converges without
-- one call ever walking it. A trimmed letter's row is deleted only while it is
-- still dead (an expired id may have been enqueued again since).
-- Needs: stats, archive.
-- @include stats
-- @include archive
local TRIM = 100

-- trim_dead(base, dead, now, ttl_ms, most): one bounded trim of the dead set.
local function trim_dead(base, dead, now, ttl_ms, most)
  local function drop(id)
    redis.call('ZREM', dead, id)
    local row = base .. 'job:' .. id
    if redis.call('HGET', row, 'state') == 'dead' then
      redis.call('DEL', row)
    end
  end
  local expired = redis.call('ZRANGE', dead, '-inf', string.format('(%d', now - ttl_ms),
    'BYSCORE', 'LIMIT', 0, TRIM)
  for _, id in ipairs(expired) do
    drop(id)
  end
  local excess = redis.call('ZCARD', dead) - most
  if excess > 0 then
    for _, id in ipairs(redis.call('ZRANGE', dead, 0, math.min(excess, TRIM) - 1)) do
      drop(id)
    end
  end
end

-- bury(base, dead, id, now, reason, err, keep, fields): the job, whose lease the
-- caller has ended, becomes a dead letter: state dead, reason, last_error,
-- finished_at_ms; its row expires after keep.ttl_ms; it joins the dead set at
-- now; 'failed' (the attempt) and 'dead' (the job) are counted (kept
-- keep.stats_ttl_ms); then the set is trimmed
-- to keep.ttl_ms and keep.max (`fields`, or nil: more field/value pairs for
-- the row's HSET); the archive hears of it. The one way every script ends a
-- job dead.
local function bury(base, dead, id, now, reason, err, keep, fields)
  local row = base .. 'job:' .. id
  redis.call('HSET', row, 'state', 'dead', 'reason', reason, 'last_error', err,
    'finished_at_ms', now, unpack(fields or {}))
  redis.call('PEXPIRE', row, keep.ttl_ms)
  redis.call('ZADD', dead, now, id)
  count(base, 'failed', now, keep.stats_ttl_ms)
  count(base, 'dead', now, keep.stats_ttl_ms)
  archive_end(row, 'dead', now)
  trim_dead(base, dead, now, keep.ttl_ms, keep.max)
end
