-- occurrence(row, pending, wake, id, payload, name, slot_ms, cap, now): admit one
-- occurrence of a recurring schedule exactly as enqueue admits a job (state
-- pending, attempts 0, payload, enqueued_at_ms; the id on pending at score 0; a
-- wake marker), plus the schedule's name and the slot the job stands for.
-- Needs: signal, rejoin.
-- @include signal
-- @include rejoin
local function occurrence(row, pending, wake, id, payload, name, slot_ms, cap, now)
  redis.call('HSET', row, 'attempts', '0', 'payload', payload,
    'enqueued_at_ms', now, 'repeat', name, 'scheduled_for_ms', slot_ms)
  rejoin(row, pending, id)
  signal(wake, 1, cap)
end
