-- The queue latency (docs/observability.md, "Queue metrics"): since when the
-- longest-waiting job at the front of the queue has been ready. Read from the
-- fronts of the lanes: for each lane read (all of them up to max_lanes;
-- beyond, the ring's first half of max_lanes and the busiest ones), the first
-- job of each of its priority levels (at most max_levels levels per lane,
-- highest priority first): the jobs the next claims of that lane serve. Each
-- front's row says since when it is ready, the latest of enqueued_at_ms,
-- run_at_ms (a scheduled, retried or snoozed job fell due) and started_at_ms
-- (a job handed back by a shutdown or the reaper). At most
-- max_lanes * max_levels fronts, each two O(log n) reads. The one definition:
-- the gauges (admin/gauges) and the metronome's per-minute sample
-- (queues/sample_latency) both read it here.
-- Needs: lanes.
-- @include lanes

-- oldest_ready(base, lanes, ring, max_lanes, max_levels): returns
-- oldest_ready_ms (false: no front read), fronts read, lanes read, and the
-- lanes with work (ZCARD of lanes).
local function oldest_ready(base, lanes, ring, max_lanes, max_levels)
  local lane_count = redis.call('ZCARD', lanes)
  local names, seen = {}, {}
  local function add(list)
    for _, lane in ipairs(list) do
      if #names < max_lanes and not seen[lane] then
        seen[lane] = true
        names[#names + 1] = lane
      end
    end
  end
  if lane_count <= max_lanes then
    add(redis.call('ZRANGE', lanes, 0, -1))
  else
    add(redis.call('ZRANGE', ring, 0, math.ceil(max_lanes / 2) - 1))
    add(redis.call('ZREVRANGE', lanes, 0, max_lanes - 1))
  end
  local oldest, fronts = false, 0
  for _, lane in ipairs(names) do
    local key = lane_pending(base, lane)
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local levels = 0
    while head[1] and levels < max_levels do
      levels = levels + 1
      fronts = fronts + 1
      local row = redis.call('HMGET', base .. 'job:' .. head[1], 'enqueued_at_ms', 'run_at_ms',
        'started_at_ms')
      local ready = math.max(tonumber(row[1]) or 0, tonumber(row[2]) or 0,
        tonumber(row[3]) or 0)
      if ready > 0 and (not oldest or ready < oldest) then oldest = ready end
      head = redis.call('ZRANGEBYSCORE', key, '(' .. head[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    end
  end
  return oldest, fronts, #names, lane_count
end
