-- set_limits: write a queue's limits (docs/protocol.md, "Limits"); every claim
-- reads them, so every process of every host sees the same ones.
-- KEYS[1] limits   emq:{q}:limits, HASH (its root names the lane keys)
-- ARGV[1] concurrency       most jobs of the queue running at once ('' = no limit)
-- ARGV[2] lane_concurrency  most jobs of one group (lane) running at once ('' = none)
-- ARGV[3] rate_count        the queue's token bucket: rate_count per rate_per_ms
-- ARGV[4] rate_per_ms       ('' and '' = no rate)
-- ARGV[5] lane_rate_count   each lane's token bucket
-- ARGV[6] lane_rate_per_ms  ('' and '' = no rate)
-- The hash's archive_max (the archive stream's cap, queues/set_archive) is
-- not a limit: it is kept as it is.
-- Returns: 1 when the limits changed, 0 when they were already these
--   (nothing is touched: runechomq writes its declared limits at every boot).
--   On a change every lane held back by the old limits (at a cap, waiting
--   for a token) rejoins the ring and consumers are woken: the new limits
--   decide at the next claim. O(lanes held back), once per change.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include signal
-- @include lanes
-- @include base
local bad_key = check_keys({{KEYS[1], 'limits'}})
if bad_key then return bad_key end
local n = {}
local names = {'concurrency', 'lane_concurrency', 'rate_count', 'rate_per_ms',
  'lane_rate_count', 'lane_rate_per_ms'}
for i = 1, 6 do
  local value, bad = opt_int_arg(ARGV[i], names[i], 1, MAX_MS)
  if bad then return bad end
  n[i] = value
end
if (n[3] == nil) ~= (n[4] == nil) or (n[5] == nil) ~= (n[6] == nil) then
  return redis.error_reply('EMQARG a rate needs both its count and its per_ms')
end
local base = queue_root(KEYS[1])
local fields = {}
local same = true
local old = redis.call('HMGET', KEYS[1], unpack(names))
local archive_max = redis.call('HGET', KEYS[1], 'archive_max')
for i = 1, 6 do
  if n[i] then
    fields[#fields + 1] = names[i]
    fields[#fields + 1] = n[i]
  end
  if tonumber(old[i]) ~= n[i] then
    same = false
  end
end
if same and redis.call('HLEN', KEYS[1]) == #fields / 2 + (archive_max and 1 or 0) then
  return 0
end
redis.call('DEL', KEYS[1])
if archive_max then
  fields[#fields + 1] = 'archive_max'
  fields[#fields + 1] = archive_max
end
if #fields > 0 then
  redis.call('HSET', KEYS[1], unpack(fields))
end
local moved = 0
for _, lane in ipairs(redis.call('SMEMBERS', base .. 'capped')) do
  redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
  moved = moved + 1
end
redis.call('DEL', base .. 'capped')
for _, lane in ipairs(redis.call('ZRANGE', base .. 'waiting', 0, -1)) do
  redis.call('ZADD', base .. 'ring', redis.call('INCR', base .. 'turn'), lane)
  moved = moved + 1
end
redis.call('DEL', base .. 'waiting')
signal(base .. 'wake', math.max(1, moved), LANE_WAKE_CAP)
return 1
