-- rejoin(row, pending, id): the job is ready: state pending, and its id on the
-- pending set. The only place that knows how pending is scored (score 0:
-- ZPOPMIN then serves ids in byte order, which is mint order).
local function rejoin(row, pending, id)
  redis.call('HSET', row, 'state', 'pending')
  redis.call('ZADD', pending, 0, id)
end
