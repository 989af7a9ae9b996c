-- occurrence(row, pending, wake, id, payload, name, slot_ms, cap, now): admit one
-- occurrence of a recurring schedule exactly as enqueue admits a job (the row
-- new_row makes, state pending, the id in the ungrouped lane at priority 0;
-- a wake marker), plus the schedule's name and the slot the job stands for.
-- Needs: signal, rejoin, admission.
-- @include signal
-- @include rejoin
-- @include admission
local function occurrence(row, pending, wake, id, payload, name, slot_ms, cap, now)
  rejoin(row, pending, id, UNGROUPED, 0,
    new_row(payload, now, UNGROUPED, 0, {'repeat', name, 'scheduled_for_ms', slot_ms}))
  signal(wake, 1, cap)
end
