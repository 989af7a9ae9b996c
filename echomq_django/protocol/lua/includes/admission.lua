-- admission(row, id): the gate every admission shares (enqueue, schedule,
-- enqueue_many). Returns an EMQKIND error reply when the id is not
-- JOB-namespaced, 0 when its row exists (a duplicate: nothing changes), or
-- nil when the job may be admitted.
-- new_row(payload, now, group, priority, more): the fields of a new job's row
-- as a list of field/value pairs, for the one HSET that writes them with the
-- state (rejoin or park_at take it): the payload (includes/payload.lua),
-- enqueued_at_ms = now, the group ('' for none: not written) and priority (0
-- is not written), and `more`, further field/value pairs (or nil).
-- attempts is not written: absent reads as 0 until the first claim.
-- Needs: args, payload.
-- @include args
-- @include payload
local function admission(row, id)
  if string.sub(id, 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. id)
  end
  if redis.call('EXISTS', row) == 1 then
    return 0
  end
  return nil
end

local function new_row(payload, now, group, priority, more)
  local fields = job_fields(group, priority)
  fields[#fields + 1] = 'enqueued_at_ms'
  fields[#fields + 1] = now
  for _, value in ipairs(more or {}) do
    fields[#fields + 1] = value
  end
  return payload_fields(payload, fields)
end
