-- announce: a runechomq process says it is alive, what it serves and how busy it is.
-- KEYS[1] workers  emq:{~}:workers (score = last announcement, server ms)
-- KEYS[2] worker   emq:{~}:worker:<id>, the announcement
-- KEYS[3] queues   emq:{~}:queues (score = last announcement, server ms)
-- ARGV[1] worker_id host:pid
-- ARGV[2] ttl_ms   the announcement expires unless renewed within this
-- ARGV[3] fields   JSON object of the announcement's fields (host, pid, queues, ...)
-- ARGV[4] queues   JSON array of queue names served
-- Returns: the server time of the announcement, ms. Entries older than ttl_ms
--          are dropped from both sets.
-- Note: keys shared by all queues; on Redis Cluster they live in slot of {~}.
-- @include now
local now = now_ms()
local fields = cjson.decode(ARGV[3])
local flat = {}
for k, v in pairs(fields) do
  flat[#flat + 1] = k
  flat[#flat + 1] = tostring(v)
end
flat[#flat + 1] = 'heartbeat_ms'
flat[#flat + 1] = now
redis.call('HSET', KEYS[2], unpack(flat))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], now, ARGV[1])
for _, q in ipairs(cjson.decode(ARGV[4])) do
  redis.call('ZADD', KEYS[3], now, q)
end
local stale = now - tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', stale)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', stale)
return now
