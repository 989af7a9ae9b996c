-- promote: release every due scheduled job to pending, on the server clock.
-- KEYS[1] schedule emq:{q}:schedule
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] base     emq:{q}: (the queue base root; row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most jobs released by this call
-- ARGV[3] wake_cap most wake markers kept
-- Returns: the count released.
-- Errors: EMQKEY the base root is not the prefix of KEYS[1].
-- @include now
-- @include signal
-- @include base
-- @include rejoin
local bad = check_base(ARGV[1], KEYS[1])
if bad then return bad end
local base = ARGV[1]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local row = base .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    rejoin(row, KEYS[2], id)
  end
end
signal(KEYS[3], #due, tonumber(ARGV[3]))
return #due
