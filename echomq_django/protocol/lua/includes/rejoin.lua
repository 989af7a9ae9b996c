-- rejoin(row, pending, id): the job is ready: state pending, and its id in its
-- lane (the group's, or the queue's pending set), scored by priority. The
-- only place that knows how a lane is scored. `pending` is the queue's
-- pending key (its root names every lane key). Needs: lanes.
-- @include lanes
local function rejoin(row, pending, id)
  local found = redis.call('HMGET', row, 'group', 'priority')
  redis.call('HSET', row, 'state', 'pending')
  lane_admit(queue_root(pending), found[1] or UNGROUPED, id, tonumber(found[2]) or 0)
end
