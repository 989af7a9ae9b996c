-- admin/gauges: one queue's gauges for the metrics view and echomq_stats, in
-- one bounded read; writes nothing (docs/observability.md, "Queue metrics").
-- The latency is includes/latency.lua's (oldest_ready): the fronts of at most
-- max_lanes lanes, max_levels priority levels each.
-- KEYS[1] pending      emq:{q}:pending (the ungrouped lane; its root names every lane)
-- KEYS[2] schedule     emq:{q}:schedule
-- KEYS[3] active       emq:{q}:active
-- KEYS[4] dead         emq:{q}:dead
-- KEYS[5] repeat       emq:{q}:repeat
-- KEYS[6] lanes        emq:{q}:lanes
-- KEYS[7] lanes_total  emq:{q}:lanes_total
-- KEYS[8] ring         emq:{q}:ring
-- KEYS[9] capped       emq:{q}:capped
-- KEYS[10] waiting     emq:{q}:waiting
-- ARGV[1] base         emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] max_lanes    most lanes whose fronts are read, 1..10000
-- ARGV[3] max_levels   most priority levels read per lane, 1..201
-- Returns: {now_ms, pending, schedule, active, dead, repeat, lanes, ready,
--   capped, waiting, next_due_ms (false: the schedule is empty),
--   oldest_ready_ms (false: no front read), fronts_read, lanes_read}; the
--   counts are ZCARD/SCARD, pending the lanes_total counter (never below 0).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root; EMQARG a malformed argument.
-- @include args
-- @include now
-- @include base
-- @include latency
local bad_key = check_keys({{KEYS[1], 'pending'}, {KEYS[2], 'schedule'}, {KEYS[3], 'active'},
  {KEYS[4], 'dead'}, {KEYS[5], 'repeat'}, {KEYS[6], 'lanes'}, {KEYS[7], 'lanes_total'},
  {KEYS[8], 'ring'}, {KEYS[9], 'capped'}, {KEYS[10], 'waiting'}}, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[2], 'max_lanes', 1, 10000}, {ARGV[3], 'max_levels', 1, 201}})
if bad_arg then return bad_arg end
local base, max_lanes, max_levels = ARGV[1], n[1], n[2]
local now = now_ms()

local oldest, fronts, lanes_read, lane_count = oldest_ready(base, KEYS[6], KEYS[8],
  max_lanes, max_levels)

local first_due = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next_due = false
if first_due[2] then next_due = tonumber(first_due[2]) end
local pending = math.max(0, tonumber(redis.call('GET', KEYS[7]) or '0') or 0)
return {now, pending, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), lane_count,
  redis.call('ZCARD', KEYS[8]), redis.call('SCARD', KEYS[9]), redis.call('ZCARD', KEYS[10]),
  next_due, oldest, fronts, lanes_read}
