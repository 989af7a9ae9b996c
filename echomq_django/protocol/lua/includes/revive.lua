-- revive(row, pending, id): put a dead letter back on pending as a fresh job:
-- attempts, stalls and snoozes back to 0, progress cleared, the verdict (reason, finish time) and any
-- lease remains dropped, the expiry dead letters carry removed. last_error is
-- kept, so the detail page still shows why it had died. Needs: rejoin.
-- @include rejoin
local function revive(row, pending, id)
  redis.call('HDEL', row, 'reason', 'finished_at_ms', 'failed_at_ms', 'cancel_requested',
    'token', 'lease_until_ms', 'consumer', 'progress', 'progress_message', 'progress_at_ms')
  redis.call('HSET', row, 'attempts', '0', 'stalls', '0', 'snoozes', '0')
  redis.call('PERSIST', row)
  rejoin(row, pending, id)
end
