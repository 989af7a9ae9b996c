-- promote: release every due scheduled job to pending, on the server clock.
-- KEYS[1] schedule emq:{q}:schedule
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] base     emq:{q}: (the queue base root; row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most jobs released by this call, 1..100000
-- ARGV[3] wake_cap most wake markers kept, 1..10000
-- Returns: the count of due members taken off schedule (released, or dropped
--   when their row is gone or no longer scheduled: an expired id enqueued again).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include base
-- @include rejoin
local bad_key = check_keys({{KEYS[1], 'schedule'}, {KEYS[2], 'pending'},
  {KEYS[3], 'wake'}}, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[2], 'batch', 1, 100000}, {ARGV[3], 'wake_cap', 1, 10000}})
if bad_arg then return bad_arg end
local base = ARGV[1]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, n[1])
local released = 0
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local row = base .. 'job:' .. id
  if redis.call('HGET', row, 'state') == 'scheduled' then
    rejoin(row, KEYS[2], id)
    released = released + 1
  end
end
signal(KEYS[3], released, n[2])
return #due
