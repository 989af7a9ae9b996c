-- The archive's events (docs/protocol.md, "Archive"): every way a job ends
-- (done, dead, cancelled) appends one event to the queue's capped stream
--   base .. 'archive'  STREAM: id <job_id> state <state> at <ms>
-- when the queue's archive is on, that is when its limits hash holds
-- 'archive_max' (the stream's cap; runechomq writes it at boot when
-- ECHOMQ["ARCHIVE"] is on, removes it when off). The cap is read with the
-- limits (queue_limits, one HMGET per script run that the ending scripts read
-- anyway), so an archive that is off costs no call, one that is on one XADD.
-- The stream key is derived from the root of the row key, itself checked or
-- derived from a checked key, so it stays in the queue's slot.
-- Needs: lanes (queue_limits), base.
-- @include lanes
-- @include base

-- archive_end(row, state, now): the job of `row` (base .. 'job:' .. id) ended
-- in `state` at `now` (server ms); one event when the archive is on.
local function archive_end(row, state, now)
  local base = queue_root(row)
  local cap = queue_limits(base)[7]
  if cap then
    redis.call('XADD', base .. 'archive', 'MAXLEN', '~', cap, '*', 'id',
      string.sub(row, #base + 5), 'state', state, 'at', now)
  end
end
