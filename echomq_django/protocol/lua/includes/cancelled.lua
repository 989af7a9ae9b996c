-- end_if_cancelled(row, active, claims, id, token, now, keep_ms): a job whose
-- cancel was requested while it ran ends cancelled, whatever its handler's
-- outcome: never done, never retried. Returns true when it did so. Needs: lease.
local function end_if_cancelled(row, active, claims, id, token, now, keep_ms)
  if redis.call('HGET', row, 'cancel_requested') ~= '1' then
    return false
  end
  end_lease(row, active, claims, id, token)
  redis.call('HSET', row, 'state', 'cancelled', 'finished_at_ms', now)
  redis.call('PEXPIRE', row, keep_ms)
  return true
end
