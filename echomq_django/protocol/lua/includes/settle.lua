-- settle(row, active, id, token, keep_ms): the start every script that ends a
-- lease shares (ack, retry, snooze, dead, release). Returns err, now, cancelled:
-- err is an EMQSTALE error reply when the token does not hold the lease
-- (nothing changed; return it). Otherwise now is the server clock and the
-- lease is over (the job left active and lost its token); cancelled is true
-- when a cancel requested while it ran has ended the job cancelled, kept
-- keep_ms, whatever the caller's outcome would have been.
-- Needs: now, fence, lease, cancelled.
local function settle(row, active, id, token, keep_ms)
  local stale = fence(row, token)
  if stale then
    return stale, nil, false
  end
  local now = now_ms()
  if end_if_cancelled(row, active, id, now, keep_ms) then
    return nil, now, true
  end
  end_lease(row, active, id)
  return nil, now, false
end
