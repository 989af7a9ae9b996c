-- end_if_cancelled(row, now, keep_ms): a job whose cancel was requested while
-- it ran ends cancelled, whatever its handler's outcome: never done, never
-- retried (and the archive hears of it). The caller has ended the lease. `requested`: the row's
-- cancel_requested as the caller read it (nil: read here). Returns true when
-- it did so. Needs: archive.
-- @include archive
local function end_if_cancelled(row, now, keep_ms, requested)
  if requested == nil then
    requested = redis.call('HGET', row, 'cancel_requested')
  end
  if requested ~= '1' then
    return false
  end
  redis.call('HSET', row, 'state', 'cancelled', 'finished_at_ms', now)
  redis.call('PEXPIRE', row, keep_ms)
  archive_end(row, 'cancelled', now)
  return true
end
