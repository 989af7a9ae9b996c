-- take(set, row, id, state): take a job off a set to move it somewhere else
-- (the admin's run now and retry). Returns 0 when id is not a member (nothing
-- changes); 2 when it is but its row is gone or not in `state` (a stale
-- member: an expired id, perhaps enqueued again since; the member is dropped
-- and the row left alone); 1 when it was taken and its row is in `state`.
local function take(set, row, id, state)
  if not redis.call('ZSCORE', set, id) then
    return 0
  end
  redis.call('ZREM', set, id)
  if redis.call('HGET', row, 'state') ~= state then
    return 2
  end
  return 1
end
