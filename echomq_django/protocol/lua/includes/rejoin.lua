-- rejoin(row, pending, id, group, priority, fields): the job is ready: state
-- pending, and its id in its lane (the group's, or the queue's pending set),
-- scored by priority. The only place that knows how a lane is scored.
-- `pending` is the queue's pending key (its root names every lane key). A
-- caller that knows the row's group ('' for none) and priority passes them;
-- without them (nil) they are read from the row. `fields` (or nil): more
-- field/value pairs written in the same HSET as the state (a new row's,
-- includes/admission.lua's new_row). Needs: lanes.
-- @include lanes
local function rejoin(row, pending, id, group, priority, fields)
  if group == nil then
    local found = redis.call('HMGET', row, 'group', 'priority')
    group, priority = found[1] or UNGROUPED, tonumber(found[2]) or 0
  end
  redis.call('HSET', row, 'state', 'pending', unpack(fields or {}))
  lane_admit(queue_root(pending), group, id, priority)
end
