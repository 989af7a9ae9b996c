-- take(set, row, id): take a job off a set to move it somewhere else (the
-- admin's run now and retry). Returns 0 when id is not a member (nothing
-- changes), 2 when it is but its row is gone (the stale member is dropped),
-- 1 when it was taken and its row exists.
local function take(set, row, id)
  if not redis.call('ZSCORE', set, id) then
    return 0
  end
  redis.call('ZREM', set, id)
  if redis.call('EXISTS', row) == 0 then
    return 2
  end
  return 1
end
