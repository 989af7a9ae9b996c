-- announce: a runechomq process says it is alive, what it serves and how busy it is.
-- KEYS[1] workers  emq:{~}:workers (score = last announcement, server ms)
-- KEYS[2] worker   emq:{~}:worker:<id>, the announcement
-- KEYS[3] queues   emq:{~}:queues (score = last announcement, server ms)
-- ARGV[1] worker_id host:pid
-- ARGV[2] ttl_ms   the announcement expires unless renewed within this
-- ARGV[3] fields   JSON object of the announcement's fields (host, pid, queues, ...)
-- ARGV[4] queues   JSON array of queue names served
-- Returns: the server time of the announcement, ms. A process's first
--          announcement (the worker hash did not exist) also drops entries
--          older than ttl_ms from both sets (at most 100 of each per call): a
--          renewal costs six commands for up to 100 queues (one ZADD per 100).
-- Note: keys shared by all queues; on Redis Cluster they live in slot of {~}.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include base
local _, bad_id = text_arg(ARGV[1], 'worker_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'workers'}, {KEYS[2], 'worker:' .. ARGV[1]},
  {KEYS[3], 'queues'}}, 'emq:{~}:')
if bad_key then return bad_key end
local ttl_ms, bad_arg = int_arg(ARGV[2], 'ttl_ms', 1, MAX_MS)
if bad_arg then return bad_arg end
local ok_fields, fields = pcall(cjson.decode, ARGV[3])
local ok_queues, queues = pcall(cjson.decode, ARGV[4])
if not ok_fields or type(fields) ~= 'table' or not ok_queues or type(queues) ~= 'table' then
  return redis.error_reply('EMQARG fields must be a JSON object and queues a JSON array')
end
local now = now_ms()
local flat = {}
for k, v in pairs(fields) do
  flat[#flat + 1] = k
  flat[#flat + 1] = tostring(v)
end
flat[#flat + 1] = 'heartbeat_ms'
flat[#flat + 1] = now
local first = redis.call('HSET', KEYS[2], unpack(flat)) > 0
redis.call('PEXPIRE', KEYS[2], ttl_ms)
redis.call('ZADD', KEYS[1], now, ARGV[1])
local scored = {}
for _, q in ipairs(queues) do
  scored[#scored + 1] = now
  scored[#scored + 1] = q
  if #scored >= 200 then
    redis.call('ZADD', KEYS[3], unpack(scored))
    scored = {}
  end
end
if #scored > 0 then
  redis.call('ZADD', KEYS[3], unpack(scored))
end
-- Forget announcements nobody renewed, a bounded number per call, when a
-- process announces itself first (every start sweeps what crashes left).
if first then
  local stale = now - ttl_ms
  for i = 1, 3, 2 do
    local old = redis.call('ZRANGE', KEYS[i], '-inf', stale, 'BYSCORE', 'LIMIT', 0, 100)
    for _, member in ipairs(old) do
      redis.call('ZREM', KEYS[i], member)
    end
  end
end
return now
