-- sample_latency: record the queue latency once a minute for the admin's chart
-- (docs/protocol.md, "sample_latency"). The metronome calls it when the server's
-- minute changes; the first call of a minute records, any later one (another
-- metronome, a restart) reads one ZCOUNT and writes nothing.
-- KEYS[1] lanes    emq:{q}:lanes
-- KEYS[2] ring     emq:{q}:ring
-- KEYS[3] latency  emq:{q}:latency, ZSET: score = minute (server ms // 60000),
--                  member = '<minute>:<latency_ms>'
-- ARGV[1] base         emq:{q}: (row and lane keys are derived from it)
-- ARGV[2] max_lanes    most lanes whose fronts are read, 1..10000
-- ARGV[3] max_levels   most priority levels read per lane, 1..201
-- ARGV[4] keep_minutes samples kept, 1..10000: older minutes are dropped
-- ARGV[5] ttl_ms       the key expires this long after the last sample, 1..2^53
-- Returns: {now_ms, latency_ms}: the latency recorded (ms, 0 with nothing
--   pending), or -1 when this minute had its sample already (nothing written).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root; EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include base
-- @include latency
local spec = {{KEYS[1], 'lanes'}, {KEYS[2], 'ring'}, {KEYS[3], 'latency'}}
local bad_key = check_keys(spec, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[2], 'max_lanes', 1, 10000}, {ARGV[3], 'max_levels', 1, 201},
  {ARGV[4], 'keep_minutes', 1, 10000}, {ARGV[5], 'ttl_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
local now = now_ms()
local minute = math.floor(now / 60000)
if redis.call('ZCOUNT', KEYS[3], minute, minute) > 0 then
  return {now, -1}
end
local oldest = oldest_ready(ARGV[1], KEYS[1], KEYS[2], n[1], n[2])
local latency = 0
if oldest then latency = math.max(0, now - oldest) end
redis.call('ZADD', KEYS[3], minute, minute .. ':' .. latency)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (minute - n[3] + 1))
redis.call('PEXPIRE', KEYS[3], n[4])
return {now, latency}
